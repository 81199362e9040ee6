package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

func TestMigrateProgress(t *testing.T) {
	polls := []struct {
		at    time.Duration
		phase string
		round int
	}{
		{0, "connecting", 0},
		{500 * time.Millisecond, "precopy", 1},
		{time.Second, "precopy", 1},
		{3 * time.Second, "precopy", 2},
		{5500 * time.Millisecond, "precopy", 3},
		{6 * time.Second, "precopy", 4},
		{6500 * time.Millisecond, "completed", 4},
	}
	play := func(tty bool) string {
		var out bytes.Buffer
		start := time.Unix(1000, 0)
		now := start
		p := progressPrinter(&out, tty, func() time.Time { return now })
		for _, s := range polls {
			now = start.Add(s.at)
			p(api.MigrationStatus{Active: true, Stats: migration.Stats{Phase: s.phase, Rounds: s.round}})
		}
		return out.String()
	}

	t.Run("not a terminal: whole lines, at phase changes and every few seconds", func(t *testing.T) {
		out := play(false)
		assert.NotContains(t, out, "\r")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if assert.Len(t, lines, 4, out) {
			assert.Contains(t, lines[0], "connecting")
			assert.Contains(t, lines[1], "precopy       round 1")
			assert.Contains(t, lines[2], "precopy       round 3", "5 s after the last line")
			assert.Contains(t, lines[3], "completed")
		}
	})
	t.Run("terminal: one line rewritten at every poll", func(t *testing.T) {
		out := play(true)
		assert.NotContains(t, out, "\n")
		assert.Equal(t, len(polls), strings.Count(out, "\r"))
	})
}
