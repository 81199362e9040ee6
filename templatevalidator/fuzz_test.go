package templatevalidator

import (
	"encoding/json"
	"testing"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// FuzzRules: rules come from annotations anyone who creates a VM or a
// template writes. Whatever they hold is an error or a result, never a
// panic, and every finding names its rule's path and message.
func FuzzRules(f *testing.F) {
	for _, seed := range []string{minMemory, virtioBus, virtioWarn, diskNames,
		`{"name": "r", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer", "message": "m", "max": "jsonpath::.spec.domain.resources.limits.memory"}`,
		`{"name": "r", "path": "jsonpath::.spec.domain.machine.type", "rule": "enum", "message": "m", "values": ["jsonpath::.metadata.labels.machine"]}`,
		`{"name": "r", "path": "jsonpath::.spec.hostname", "rule": "string", "message": "m", "minLength": 3, "maxLength": 8}`,
	} {
		f.Add("[" + seed + "]")
	}
	f.Fuzz(func(t *testing.T, data string) {
		check(t, data)
	})
}

// FuzzPath puts the fuzzer's expression in each kind of rule, to reach
// client-go's JSONPath parser and evaluator with any path.
func FuzzPath(f *testing.F) {
	for _, seed := range []string{".spec.domain.memory.guest", ".spec.domain.devices.disks[*].disk.bus",
		".spec.domain.devices.disks[?(@.name==\"rootdisk\")].disk.bus", ".spec.volumes[0].name", "..bus",
		".metadata.labels['a.b/c']", ".spec.domain.devices.disks[0:1].name", ".spec.domain.cpu.*"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		for _, kind := range []string{`"integer", "min": 1`, `"string", "maxLength": 3`, `"enum", "values": ["virtio"]`, `"regex", "regex": "^v"`} {
			p, err := json.Marshal("jsonpath::" + expr)
			if err != nil {
				t.Fatal(err)
			}
			check(t, `[{"name": "r", "message": "m", "path": `+string(p)+`, "valid": `+string(p)+`, "rule": `+kind+`}]`)
			check(t, `[{"name": "r", "message": "m", "path": `+string(p)+`, "rule": `+kind+`}]`)
		}
	})
}

func check(t *testing.T, data string) {
	rules, err := ParseRules(data)
	if err != nil {
		return
	}
	for name, v := range map[string]*v1.VirtualMachine{"fedora": fedoraVM(sataData), "no disks": fedoraVM(noDisks)} {
		res, err := Evaluate(rules, v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, fs := range [][]Finding{res.Violations, res.Warnings} {
			for _, f := range fs {
				if f.Path == "" || f.Message == "" || f.Detail == "" {
					t.Fatalf("%s: a finding without its path, message or detail: %+v", name, f)
				}
			}
		}
	}
}
