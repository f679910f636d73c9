// Package bootstrap is the record a cluster's control-plane replicas
// share and none may keep to itself: the first admin key (so that each
// replica can write <data-dir>/admin.key, as `space serve` does), the key
// secrets are encrypted with (so that a secret stored through one replica
// is read through another), and the cluster's egress CA (so that every
// node's templates trust one CA and hash to one id, and every node's
// gateway signs with it). All are sealed with AES-256-GCM under a key
// derived from the cluster token with HKDF-SHA256: the database alone
// does not give them away, and any replica holding the token opens them.
// A replica started with another token cannot, and says so.
package bootstrap

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
)

const (
	recordBucket = "bootstrap"
	recordKey    = "cluster"
	// keyInfo binds the derived key to this use (and version).
	keyInfo = "space cluster bootstrap v1"
)

// sealedRecord is the stored record; each field is nonce || sealed.
type sealedRecord struct {
	// AdminKey is empty when the store held keys before the record was
	// made (a store first used by `space serve --store postgres://`).
	AdminKey   []byte `json:"admin_key,omitempty"`
	SecretsKey []byte `json:"secrets_key"`
	// EgressCACert and EgressCAKey are PEM; empty in records made before
	// the cluster had an egress CA, which get one when next loaded.
	EgressCACert []byte `json:"egress_ca_cert,omitempty"`
	EgressCAKey  []byte `json:"egress_ca_key,omitempty"`
}

// Seed is what a new record takes instead of making it: what serve
// before one house kept in files (upgrade.ServeSeed). Zero fields are
// made as usual.
type Seed struct {
	EgressCA   *credentials.CA
	SecretsKey []byte
	// AdminKey is an admin key the store holds already (<data-dir>/admin.key),
	// sealed into the record so that every start writes that file again.
	AdminKey string
}

// Record is what a replica learns from the cluster's bootstrap record,
// opened.
type Record struct {
	AdminKey   string // "" when the record holds none
	SecretsKey []byte
	EgressCA   *credentials.CA
	Created    bool // this replica minted the admin key
}

// recordAEAD derives the record's cipher from the cluster token.
func recordAEAD(token string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(token), nil, keyInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the bootstrap key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func seal(aead cipher.AEAD, plain []byte, field string) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	// The field name is authenticated too: one sealed value cannot be
	// passed off as the other.
	return aead.Seal(nonce, nonce, plain, []byte(field)), nil
}

func open(aead cipher.AEAD, sealed []byte, field string) ([]byte, error) {
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("sealed value too short")
	}
	return aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(field))
}

// Load reads the cluster's bootstrap record, making it when the
// store has none: under a store lock, so that replicas starting together
// on an empty store mint one admin key between them.
//
// given, when not empty, is the first admin key the operator chose (an
// installer's generated Secret); it is used instead of a minted one on an
// empty store and ignored on a store that has keys already. A new record
// takes what seed holds.
func Load(ctx context.Context, st store.Store, keys *auth.Keys, token, adminKeyPath, given string, seed Seed) (Record, error) {
	aead, err := recordAEAD(token)
	if err != nil {
		return Record{}, err
	}
	unlock, err := st.Lock(ctx, "bootstrap")
	if err != nil {
		return Record{}, fmt.Errorf("lock the bootstrap record: %w", err)
	}
	defer unlock()
	var rec sealedRecord
	err = st.Get(recordBucket, recordKey, &rec)
	if err == nil {
		var b Record
		if b.SecretsKey, err = open(aead, rec.SecretsKey, "secrets_key"); err != nil {
			return Record{}, errors.New("cannot open the cluster's bootstrap record: it was sealed with another cluster token (every replica needs the same --cluster-token-file)")
		}
		if len(rec.AdminKey) > 0 {
			admin, err := open(aead, rec.AdminKey, "admin_key")
			if err != nil {
				return Record{}, errors.New("cannot open the cluster's bootstrap record: it was sealed with another cluster token")
			}
			b.AdminKey = string(admin)
		}
		if len(rec.EgressCAKey) > 0 {
			if b.EgressCA, err = openEgressCA(aead, rec); err != nil {
				return Record{}, err
			}
			return b, nil
		}
		// A record from before the cluster had an egress CA gets one.
		if b.EgressCA, err = sealEgressCA(aead, &rec, nil); err != nil {
			return Record{}, err
		}
		if err := st.Put(recordBucket, recordKey, rec); err != nil {
			return Record{}, fmt.Errorf("write the bootstrap record: %w", err)
		}
		return b, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("read the bootstrap record: %w", err)
	}
	b := Record{SecretsKey: seed.SecretsKey}
	if b.SecretsKey == nil {
		b.SecretsKey = make([]byte, secrets.KeySize)
		if _, err := rand.Read(b.SecretsKey); err != nil {
			return Record{}, err
		}
	}
	if rec.SecretsKey, err = seal(aead, b.SecretsKey, "secrets_key"); err != nil {
		return Record{}, err
	}
	if b.EgressCA, err = sealEgressCA(aead, &rec, seed.EgressCA); err != nil {
		return Record{}, err
	}
	if !keys.Empty() && seed.AdminKey != "" {
		b.AdminKey = seed.AdminKey
		if rec.AdminKey, err = seal(aead, []byte(b.AdminKey), "admin_key"); err != nil {
			return Record{}, err
		}
	}
	if keys.Empty() {
		if given != "" {
			if _, err := keys.Import("admin", project.Default, true, given); err != nil {
				return Record{}, fmt.Errorf("the given admin key: %w", err)
			}
			b.AdminKey = given
		} else if b.AdminKey, err = MintAdminKey(keys, "admin", adminKeyPath); err != nil {
			return Record{}, err
		} else {
			b.Created = true
		}
		if rec.AdminKey, err = seal(aead, []byte(b.AdminKey), "admin_key"); err != nil {
			return Record{}, err
		}
	}
	if err := st.Put(recordBucket, recordKey, rec); err != nil {
		return Record{}, fmt.Errorf("write the bootstrap record: %w", err)
	}
	return b, nil
}

// Exists reports whether st holds the cluster's bootstrap record: a store
// that has keys but none was written by serve before one house.
func Exists(st store.Store) (bool, error) {
	var rec sealedRecord
	err := st.Get(recordBucket, recordKey, &rec)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the bootstrap record: %w", err)
	}
	return true, nil
}

// sealEgressCA puts the cluster's egress CA in rec: ca, or a new one when
// ca is nil.
func sealEgressCA(aead cipher.AEAD, rec *sealedRecord, ca *credentials.CA) (*credentials.CA, error) {
	if ca == nil {
		var err error
		if ca, err = credentials.NewCA("cluster"); err != nil {
			return nil, err
		}
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if rec.EgressCAKey, err = seal(aead, keyPEM, "egress_ca_key"); err != nil {
		return nil, err
	}
	// The certificate is public, but sealed too, so that a changed one in
	// the database is refused rather than installed into templates.
	if rec.EgressCACert, err = seal(aead, ca.CertPEM(), "egress_ca_cert"); err != nil {
		return nil, err
	}
	return ca, nil
}

func openEgressCA(aead cipher.AEAD, rec sealedRecord) (*credentials.CA, error) {
	keyPEM, kerr := open(aead, rec.EgressCAKey, "egress_ca_key")
	certPEM, cerr := open(aead, rec.EgressCACert, "egress_ca_cert")
	if kerr != nil || cerr != nil {
		return nil, errors.New("cannot open the egress CA in the cluster's bootstrap record: it was sealed with another cluster token")
	}
	ca, err := credentials.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the cluster's egress CA: %w", err)
	}
	return ca, nil
}

// WriteAdminKeyFile writes the admin key to path (0600) unless it holds it
// already.
func WriteAdminKeyFile(path, secret string) error {
	if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == secret {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write admin key: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("write admin key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write admin key: %w", err)
	}
	return nil
}

// MintAdminKey creates an admin key of the default project and writes it
// to path (0600), replacing what the file held.
func MintAdminKey(keys *auth.Keys, name, path string) (string, error) {
	_, secret, err := keys.Create(name, project.Default, true)
	if err != nil {
		return "", err
	}
	if err := WriteAdminKeyFile(path, secret); err != nil {
		return "", err
	}
	return secret, nil
}
