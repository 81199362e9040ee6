package process

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerate(t *testing.T) {
	for _, tc := range []struct{ from, want string }{
		{"fedora-[a-z0-9]{16}", `^fedora-[a-z0-9]{16}$`},
		{"[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}", `^[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}$`},
		{"test[0-9]{1}x", `^test[0-9]x$`},
		{"0x[A-F0-9]{4}", `^0x[A-F0-9]{4}$`},
		{"[0-1]{8}", `^[01]{8}$`},
		{`[\d]{5}`, `^[0-9]{5}$`},
		{`[\w]{20}`, `^[a-zA-Z0-9_]{20}$`},
		{`[\a]{20}`, `^[a-zA-Z0-9]{20}$`},
		{`[\A]{20}`, "^[~!@#$%^&*()\\-_+={}\\[\\]\\\\|<,>.?/\"';:`]{20}$"},
		{"[abc]{30}", `^[abc]{30}$`},
		{"[a-cX]{30}", `^[abcX]{30}$`},
		{"[a]{255}", `^a{255}$`},
		{"no expression", `^no expression$`},
		{"[a-z] without a length", `^\[a-z\] without a length$`},
		{`\d{3} outside brackets`, `^\\d\{3\} outside brackets$`},
		{"", `^$`},
	} {
		t.Run(tc.from, func(t *testing.T) {
			got, err := Generate(tc.from)
			require.NoError(t, err)
			assert.Regexp(t, regexp.MustCompile(tc.want), got)
		})
	}
}

// Ranges are inclusive: each end is drawn (oc's generator never draws the
// upper end of a range; [a-c] here yields a, b and c).
func TestGenerateCoversTheRange(t *testing.T) {
	got, err := Generate("[a-c]{255}")
	require.NoError(t, err)
	for _, c := range "abc" {
		assert.Contains(t, got, string(c)) // each missing in 255 draws: p = (2/3)^255
	}
}

func TestGenerateRefuses(t *testing.T) {
	for _, tc := range []struct{ from, wantErr string }{
		{"[]{3}", "no characters"},
		{"[z-a]{3}", "range z-a"},
		{"[a-Z]{3}", "range a-Z"},
		{"[0-z]{3}", "range 0-z"},
		{"[a-]{3}", `'-' is not a letter`},
		{"[a.b]{3}", `'.' is not a letter`},
		{`[\x]{3}`, "a backslash starts"},
		{`[a\]{3}`, "a backslash starts"},
		{"[a]{0}", "the length must be 1 to 255"},
		{"[a]{256}", "the length must be 1 to 255"},
		{"[a]{99999999999999999999}", "the length must be 1 to 255"},
		{"ok-[a]{2}-[]{1}", `expression "[]{1}"`},
	} {
		t.Run(tc.from, func(t *testing.T) {
			_, err := Generate(tc.from)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func FuzzGenerate(f *testing.F) {
	for _, s := range []string{"fedora-[a-z0-9]{16}", `[\w\d]{3}x`, "[a-]{2}", "[[a]{2}]{3}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, from string) {
		got, err := Generate(from)
		if err == nil && !strings.Contains(from, "]{") && got != from {
			t.Fatalf("%q has no expression but became %q", from, got)
		}
	})
}
