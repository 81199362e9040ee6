package templatevalidator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRules(t *testing.T) {
	rules, err := ParseRules(`[
	  {"name": "minimal-required-memory", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer",
	   "message": "This VM requires more memory.", "min": 2147483648, "max": "jsonpath::.spec.domain.resources.limits.memory"},
	  {"name": "bus", "path": "jsonpath::$.spec.domain.devices.disks[*].disk.bus", "valid": "jsonpath::.spec.domain.devices.disks[*].disk.bus",
	   "rule": "enum", "message": "virtio is faster", "values": ["virtio", "jsonpath::.spec.domain.machine.type"], "justWarning": true},
	  {"name": "host", "path": "jsonpath::.spec.hostname", "rule": "string", "message": "m", "minLength": 1, "maxLength": 63},
	  {"name": "disk-names", "path": "jsonpath::.spec.domain.devices.disks[*].name", "rule": "regex", "message": "m", "regex": "^[a-z]+$"}
	]`)
	require.NoError(t, err)
	require.Len(t, rules, 4)
	mem := rules[0]
	assert.Equal(t, Integer, mem.Kind)
	assert.Equal(t, ".spec.domain.memory.guest", mem.Path.String())
	assert.Equal(t, &IntOrPath{Int: 2147483648}, mem.Min)
	require.NotNil(t, mem.Max.Path)
	assert.Equal(t, ".spec.domain.resources.limits.memory", mem.Max.Path.String())
	bus := rules[1]
	assert.Equal(t, ".spec.domain.devices.disks[*].disk.bus", bus.Path.String(), "a leading $ is dropped: paths are relative")
	assert.True(t, bus.JustWarning)
	require.NotNil(t, bus.Valid)
	require.Len(t, bus.Values, 2)
	assert.Equal(t, "virtio", bus.Values[0].Str)
	assert.NotNil(t, bus.Values[1].Path)
	assert.Equal(t, int64(63), rules[2].MaxLength.Int)
	assert.Equal(t, "^[a-z]+$", rules[3].Regex.String())

	for _, empty := range []string{"", "  \n"} {
		rules, err := ParseRules(empty)
		require.NoError(t, err)
		assert.Empty(t, rules)
	}
}

func TestParseRulesMalformed(t *testing.T) {
	const ok = `"name": "r", "path": "jsonpath::.spec.domain.memory.guest", "message": "m"`
	for _, tc := range []struct {
		name, rules, err string
	}{
		{"not JSON", `[{`, "not a JSON array of rules"},
		{"not an array", `{"name": "r"}`, "not a JSON array of rules"},
		{"not an object", `["r"]`, "rule 0: json: cannot unmarshal string"},
		{"no name", `[{"rule": "integer", "path": "jsonpath::.spec", "message": "m"}]`, "rule 0: name is required"},
		{"no rule", `[{"name": "r", "path": "jsonpath::.spec", "message": "m"}]`, `rule 0 ("r"): rule is required`},
		{"no path", `[{"name": "r", "rule": "integer", "message": "m"}]`, `rule 0 ("r"): path is required`},
		{"no message", `[{"name": "r", "rule": "integer", "path": "jsonpath::.spec"}]`, `rule 0 ("r"): message is required`},
		{"unknown kind", `[{` + ok + `, "rule": "float"}]`, `rule "float" is not one of integer, string, enum, regex`},
		{"unknown key", `[{` + ok + `, "rule": "integer", "minimum": 1}]`, `unknown field "minimum"`},
		{"key of another kind", `[{` + ok + `, "rule": "integer", "regex": "x"}]`, "regex does not apply to rule integer (it takes min, max)"},
		{"length on integer", `[{` + ok + `, "rule": "integer", "minLength": 1}]`, "minLength does not apply to rule integer"},
		{"duplicate name", `[{` + ok + `, "rule": "integer"}, {` + ok + `, "rule": "integer"}]`, `rule 1 ("r"): the name is used by an earlier rule`},
		{"path without prefix", `[{"name": "r", "rule": "integer", "message": "m", "path": ".spec.domain"}]`, `path: ".spec.domain" does not start with "jsonpath::"`},
		{"path that does not parse", `[{"name": "r", "rule": "integer", "message": "m", "path": "jsonpath::.spec[?("}]`, `path: "jsonpath::.spec[?("`},
		{"empty path", `[{"name": "r", "rule": "integer", "message": "m", "path": "jsonpath::"}]`, `names nothing`},
		{"bad valid", `[{` + ok + `, "rule": "integer", "valid": "spec"}]`, `valid: "spec" does not start with "jsonpath::"`},
		{"fractional bound", `[{` + ok + `, "rule": "integer", "min": 1.5}]`, "min: 1.5 is not an integer"},
		{"quantity bound", `[{` + ok + `, "rule": "integer", "min": "2Gi"}]`, `min: "2Gi" does not start with "jsonpath::"`},
		{"boolean bound", `[{` + ok + `, "rule": "integer", "max": true}]`, "max: true is neither an integer nor a path"},
		{"enum without values", `[{` + ok + `, "rule": "enum"}]`, "an enum rule needs values"},
		{"enum with a bad path", `[{` + ok + `, "rule": "enum", "values": ["jsonpath::.a[?("]}]`, "values: "},
		{"regex without regex", `[{` + ok + `, "rule": "regex"}]`, "a regex rule needs regex"},
		{"bad regex", `[{` + ok + `, "rule": "regex", "regex": "("}]`, "regex: error parsing regexp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules(tc.rules)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			assert.Nil(t, rules)
		})
	}
}
