package redteam

// Catalog returns every attempt, grouped by category in running order.
func Catalog() []Attempt {
	var all []Attempt
	for _, part := range [][]Attempt{
		filesystemAttempts(), processAttempts(), kernelAttempts(), networkAttempts(),
		dnsAttempts(), credentialAttempts(), resourceAttempts(), buildAttempts(),
	} {
		all = append(all, part...)
	}
	return all
}
