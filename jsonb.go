package outbox

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// maxJSONExponent bounds a JSON number's decimal exponent: PostgreSQL's numeric (and so
// jsonb) refuses values far outside about 1e±131072; we stop well inside that.
const maxJSONExponent = 100000

// numeric keeps at most 131072 digits before the decimal point and 16383 after it.
const (
	maxJSONIntegerDigits  = 131072
	maxJSONFractionDigits = 16383
)

// checkJSONB reports why PostgreSQL's jsonb would refuse b, or nil. Beyond what
// encoding/json accepts, jsonb refuses invalid UTF-8, the escape \u0000, unpaired
// UTF-16 surrogate escapes and numbers too large for numeric.
func checkJSONB(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("is not valid UTF-8")
	}
	if !json.Valid(b) {
		return errors.New("is not valid JSON")
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '"':
				inString = false
			case '\\':
				i++
				if b[i] != 'u' {
					continue
				}
				r := hex4(b[i+1 : i+5])
				i += 4
				switch {
				case r == 0:
					return errors.New(`contains the escape \u0000, which PostgreSQL's jsonb refuses`)
				case r >= 0xDC00 && r <= 0xDFFF:
					return errors.New("contains an unpaired low surrogate escape")
				case r >= 0xD800 && r <= 0xDBFF:
					if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
						return errors.New("contains an unpaired high surrogate escape")
					}
					if lo := hex4(b[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
						return errors.New("contains an unpaired high surrogate escape")
					}
					i += 6
				}
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
		case isDigit(c):
			j := i
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			limit := maxJSONIntegerDigits
			if i > 0 && b[i-1] == '.' {
				limit = maxJSONFractionDigits
			}
			if j-i > limit {
				return errors.New("contains a number with more digits than PostgreSQL's numeric keeps")
			}
			i = j - 1
		case c == 'e' || c == 'E':
			// Only numbers hold e/E outside strings (true/false/null have no e in a
			// position after a digit, and "true"/"false" end in e: skip those).
			if i == 0 || !isDigit(b[i-1]) && b[i-1] != '.' {
				continue
			}
			j := i + 1
			if j < len(b) && (b[j] == '+' || b[j] == '-') {
				j++
			}
			exp := 0
			for ; j < len(b) && isDigit(b[j]); j++ {
				if exp = exp*10 + int(b[j]-'0'); exp > maxJSONExponent {
					return errors.New("contains a number too large for PostgreSQL's numeric")
				}
			}
			i = j - 1
		}
	}
	return nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// hex4 decodes four hex digits; json.Valid has already checked them.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
