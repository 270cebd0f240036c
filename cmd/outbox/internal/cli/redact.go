package cli

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// redacted replaces a secret wherever it would be printed.
const redacted = "xxxxx"

// scrubber is the last line of defence for secrets: every byte the command writes (its
// output, its errors, its logs) goes through a scrubWriter that replaces each known
// secret. The first line is not to put secrets into messages at all (see dsnError).
type scrubber struct {
	mu      sync.RWMutex
	secrets []string
}

func (s *scrubber) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range secrets {
		if v != "" {
			s.secrets = append(s.secrets, v)
		}
	}
}

func (s *scrubber) scrub(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.secrets {
		text = strings.ReplaceAll(text, v, redacted)
	}
	return text
}

// scrubWriter writes through a scrubber. Each Write is scrubbed on its own: the
// command's writers (fmt, slog, encoding/json) write whole lines or documents at once.
type scrubWriter struct {
	s *scrubber
	w io.Writer
}

func (w scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.s.scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

var (
	urlPassword    = regexp.MustCompile(`^[a-z]+://[^/@]*?:([^/@]*)@`)
	kvPassword     = regexp.MustCompile(`(?:^|\s)(?:ssl)?password\s*=\s*(?:'((?:\\.|[^'\\])*)'|(\S+))`)
	queryPasswords = []string{"password", "sslpassword"}
)

// dsnPassword returns the password(s) in a connection string, best effort, for the
// scrubber; the empty string when there is none.
func dsnPassword(dsn string) string {
	if dsn == "" {
		return ""
	}
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				return pw
			}
			for _, k := range queryPasswords {
				if pw := u.Query().Get(k); pw != "" {
					return pw
				}
			}
			return ""
		}
		if m := urlPassword.FindStringSubmatch(dsn); m != nil {
			return m[1]
		}
		return ""
	}
	if m := kvPassword.FindStringSubmatch(dsn); m != nil {
		return m[1] + m[2]
	}
	return ""
}

// dsnError is the error of a connection string pgx could not parse. pgx's own message
// repeats the connection string with the passwords it recognises masked — best effort:
// a malformed string can hide one from it — so the string is left out entirely and only
// the reason is kept.
func dsnError(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if inner := errors.Unwrap(pe); inner != nil {
			return fmt.Errorf("database.url: invalid connection string (not shown): %w", inner)
		}
		return errors.New("database.url: invalid connection string (not shown)")
	}
	return fmt.Errorf("database.url: %w", err)
}
