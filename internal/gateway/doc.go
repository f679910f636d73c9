// Package gateway runs each sandbox's egress services in its slot's gateway
// namespace: a DNS resolver that answers only what the sandbox's policy
// allows and opens the answered addresses in nftables, and a transparent
// HTTP/HTTPS proxy that decides by Host / TLS SNI rather than by address.
package gateway
