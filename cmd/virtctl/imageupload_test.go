package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseImageUpload(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
		want imageUpload
	}{
		{args: []string{"dv", "disk", "--size=1Gi", "--image-path=/x.qcow2"},
			want: imageUpload{kind: "dv", name: "disk", size: "1Gi", imagePath: "/x.qcow2", waitSecs: 300, retries: 5}},
		{args: []string{"--size", "1Gi", "pvc", "--image-path", "/x", "disk", "--block-volume", "--insecure", "--uploadproxy-url=https://h:31001"},
			want: imageUpload{kind: "pvc", name: "disk", size: "1Gi", imagePath: "/x", volumeMode: "block", blockVolume: true, insecure: true, uploadProxyURL: "https://h:31001", waitSecs: 300, retries: 5}},
		{args: []string{"dv", "disk", "--no-create", "--image-path=/x"},
			want: imageUpload{kind: "dv", name: "disk", noCreate: true, imagePath: "/x", waitSecs: 300, retries: 5}},
		{args: []string{"dv", "disk", "--image-path=/x"}, err: "--size is required"},
		{args: []string{"dv", "disk", "--size=1Gi"}, err: "--image-path is required"},
		{args: []string{"vm", "disk", "--size=1Gi", "--image-path=/x"}, err: "want dv|pvc NAME"},
		{args: []string{"dv", "--size=1Gi", "--image-path=/x"}, err: "want dv|pvc NAME"},
		{args: []string{"dv", "disk", "--size=-1Gi", "--image-path=/x"}, err: "positive quantity"},
		{args: []string{"dv", "disk", "--size=lots", "--image-path=/x"}, err: "positive quantity"},
		{args: []string{"dv", "disk", "--size=1Gi", "--image-path=/x", "--volume-mode=tape"}, err: "want block or filesystem"},
		{args: []string{"dv", "disk", "--size=1Gi", "--image-path=/x", "--volume-mode=filesystem", "--block-volume"}, err: "disagree"},
		{args: []string{"dv", "disk", "--size=1Gi", "--image-path=/x", "--access-mode=Everyone"}, err: "--access-mode"},
		{args: []string{"dv", "disk", "--size=1Gi", "--archive-path=/x.tar"}, err: "--archive-path is not supported"},
		{args: []string{"dv", "disk", "--size=1Gi", "--image-path=/x", "--force-bind"}, err: "--force-bind is not supported"},
		{args: []string{"dv", "disk", "--size=1Gi", "--image-path=/x", "--bogus"}, err: "unknown flag: --bogus"},
		// upstream's deprecated spellings
		{args: []string{"--pvc-name=disk", "--pvc-size=1Gi", "--image-path=/x"},
			want: imageUpload{kind: "pvc", name: "disk", size: "1Gi", pvcName: "disk", pvcSize: "1Gi", imagePath: "/x", waitSecs: 300, retries: 5}},
		{args: []string{"--pvc-name=disk", "pvc", "disk", "--size=1Gi", "--image-path=/x"}, err: "want dv|pvc NAME"},
		{args: []string{"dv", "disk", "--pvc-size=1Gi", "--size=2Gi", "--image-path=/x"}, err: "--pvc-size and --size disagree"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			u, err := parseImageUpload(tc.args)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, *u)
		})
	}
}

func TestProgressWithoutTerminal(t *testing.T) {
	var out bytes.Buffer
	p := startProgress(&out, 1000, false)
	_, err := io.Copy(io.Discard, &progressReader{r: bytes.NewReader(make([]byte, 1000)), p: p})
	require.NoError(t, err)
	p.finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, "100%", lines[len(lines)-1], "plain percentages for logs, ending at 100%%")
	assert.NotContains(t, out.String(), "\r")
}
