package process

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// GeneratorExpression is the one generator OpenShift templates have.
const GeneratorExpression = "expression"

// MaxGenerated is the most characters one [RANGES]{N} may ask for, as in
// OpenShift.
const MaxGenerated = 255

// The character classes of the expression generator (OpenShift's).
const (
	lower   = "abcdefghijklmnopqrstuvwxyz"
	upper   = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digits  = "0123456789"
	symbols = "~!@#$%^&*()-_+={}[]\\|<,>.?/\"';:`"
)

var classes = map[byte]string{
	'w': lower + upper + digits + "_",
	'd': digits,
	'a': lower + upper + digits,
	'A': symbols,
}

// generatorExp finds each [RANGES]{N} in a generator's input.
var generatorExp = regexp.MustCompile(`\[([^\]]*)\]\{([0-9]+)\}`)

// Generate expands each [RANGES]{N} in from into N characters drawn
// (crypto/rand) from RANGES: ranges such as a-z, A-F or 0-9, single letters
// and digits, and the classes \w (letters, digits, _), \d (digits), \a
// (letters and digits) and \A (symbols). The rest of from is kept as is:
// "fedora-[a-z0-9]{16}" gives "fedora-" and 16 random characters.
func Generate(from string) (string, error) {
	var b strings.Builder
	rest := from
	for {
		m := generatorExp.FindStringSubmatchIndex(rest)
		if m == nil {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:m[0]])
		expr := rest[m[0]:m[1]]
		alphabet, err := alphabet(rest[m[2]:m[3]])
		if err != nil {
			return "", fmt.Errorf("expression %q: %w", expr, err)
		}
		n, err := strconv.Atoi(rest[m[4]:m[5]])
		if err != nil || n < 1 || n > MaxGenerated {
			return "", fmt.Errorf("expression %q: the length must be 1 to %d", expr, MaxGenerated)
		}
		for range n {
			i, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
			if err != nil {
				return "", fmt.Errorf("reading random bytes: %w", err)
			}
			b.WriteByte(alphabet[i.Int64()])
		}
		rest = rest[m[1]:]
	}
}

// alphabet is the set of characters a bracket expression's content names,
// each once.
func alphabet(ranges string) (string, error) {
	if ranges == "" {
		return "", fmt.Errorf("no characters between the brackets")
	}
	seen := map[byte]bool{}
	var out []byte
	add := func(s string) {
		for i := range len(s) {
			if !seen[s[i]] {
				seen[s[i]] = true
				out = append(out, s[i])
			}
		}
	}
	for i := 0; i < len(ranges); i++ {
		c := ranges[i]
		switch {
		case c == '\\':
			if i+1 == len(ranges) || classes[ranges[i+1]] == "" {
				return "", fmt.Errorf(`a backslash starts one of \w, \d, \a or \A`)
			}
			add(classes[ranges[i+1]])
			i++
		case class(c) != "":
			if i+2 < len(ranges) && ranges[i+1] == '-' {
				to := ranges[i+2]
				if class(to) != class(c) || to < c {
					return "", fmt.Errorf("range %c-%c: both ends must be lower-case letters, upper-case letters or digits, in order", c, to)
				}
				for x := c; x <= to; x++ {
					add(string(x))
				}
				i += 2
				continue
			}
			add(string(c))
		default:
			return "", fmt.Errorf("%q is not a letter, a digit, a range or a class", c)
		}
	}
	return string(out), nil
}

// class is the range class c belongs to, "" for none.
func class(c byte) string {
	for _, s := range []string{lower, upper, digits} {
		if strings.IndexByte(s, c) >= 0 {
			return s
		}
	}
	return ""
}
