package main

import "testing"

func TestVolumeCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"volume"}, "volume: want add"},
		{[]string{"volume", "attach"}, `unknown operation "attach"`},
		{[]string{"volume", "add", "--name", "v", "--path", "/x"}, "--api is required"},
		{[]string{"volume", "add", "--api", "/nonexistent.sock", "--path", "/x"}, "--name is required"},
		{[]string{"volume", "add", "--api", "/nonexistent.sock", "--name", "v"}, "--path is required"},
		{[]string{"volume", "remove", "--api", "/nonexistent.sock"}, "--name is required"},
		{[]string{"volume", "list", "--api", "/s", "--name", "v"}, "flag provided but not defined: -name"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			assertOneLineError(t, vmm(t, tc.args...), tc.want)
		})
	}
}
