package disk

import (
	"fmt"
	"strconv"
	"strings"
)

// grubConfigs are where grub-mkconfig writes grub.cfg, on a root
// filesystem and on a separate /boot.
var grubConfigs = []string{"/boot/grub/grub.cfg", "/boot/grub2/grub.cfg", "/grub/grub.cfg", "/grub2/grub.cfg"}

// maxGrubDepth bounds nesting of blocks (menuentry, submenu, function).
const maxGrubDepth = 16

func findGrub(v *volume) (*entry, error) {
	for _, p := range grubConfigs {
		text, ok, err := readConfig(v, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		menu, def, err := parseGrub(text)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", v, p, err)
		}
		m := grubDefault(menu, def)
		if m == nil {
			continue
		}
		return &entry{vol: v, source: fmt.Sprintf("%s %s menuentry %q", v, p, m.title),
			kernel: m.linux, initrds: m.initrds, options: m.options}, nil
	}
	return nil, nil
}

// grubItem is a menuentry, or a submenu holding more.
type grubItem struct {
	title, id string
	linux     string
	initrds   []string
	options   string
	sub       []*grubItem // non-nil for a submenu
}

// parseGrub reads the menu and the last constant "set default=" at the
// top level. Scripting is not run: a default taken from a variable
// (saved_entry, next_entry) counts as unset, and grub then boots entry 0.
func parseGrub(text string) ([]*grubItem, string, error) {
	lines := strings.Split(text, "\n")
	var def string
	// stack of open blocks; nil entries are blocks that are not menus
	// (function bodies, ...).
	type block struct {
		item  *grubItem
		items *[]*grubItem
	}
	var top []*grubItem
	stack := []block{{items: &top}}
	for _, raw := range lines {
		w := grubWords(raw)
		if len(w) == 0 {
			continue
		}
		cur := stack[len(stack)-1]
		switch {
		case w[0] == "}":
			if len(stack) == 1 {
				return nil, "", fmt.Errorf("unbalanced }")
			}
			stack = stack[:len(stack)-1]
			continue
		case w[len(w)-1] == "{":
			if len(stack) > maxGrubDepth {
				return nil, "", fmt.Errorf("blocks nested deeper than %d", maxGrubDepth)
			}
			b := block{}
			if (w[0] == "menuentry" || w[0] == "submenu") && len(w) > 2 && cur.items != nil {
				it := &grubItem{title: w[1]}
				for i := 2; i+1 < len(w); i++ {
					if w[i] == "--id" || w[i] == "$menuentry_id_option" {
						it.id = w[i+1]
					}
				}
				if w[0] == "submenu" {
					it.sub = []*grubItem{}
					b.items = &it.sub
				}
				*cur.items = append(*cur.items, it)
				b.item = it
			}
			stack = append(stack, b)
			continue
		}
		if len(stack) == 1 && w[0] == "set" && len(w) == 2 {
			if k, v, ok := strings.Cut(w[1], "="); ok && k == "default" && !strings.Contains(v, "$") {
				def = v
			}
		}
		it := cur.item
		if it == nil || it.sub != nil {
			continue
		}
		switch w[0] {
		case "linux", "linuxefi", "linux16":
			if len(w) > 1 {
				it.linux = grubPath(w[1])
				var opts []string
				for _, o := range w[2:] {
					if !strings.Contains(o, "$") { // unexpanded variables ($vt_handoff)
						opts = append(opts, o)
					}
				}
				it.options = strings.Join(opts, " ")
			}
		case "initrd", "initrdefi", "initrd16":
			for _, p := range w[1:] {
				it.initrds = append(it.initrds, grubPath(p))
			}
		}
	}
	return top, def, nil
}

// grubPath drops a device prefix: "($root)/vmlinuz", "(hd0,gpt2)/vmlinuz".
func grubPath(p string) string {
	if strings.HasPrefix(p, "(") {
		if i := strings.IndexByte(p, ')'); i >= 0 {
			p = p[i+1:]
		}
	}
	return p
}

// grubWords splits a line into words, honouring quotes and comments
// (enough of grub's shell syntax for grub-mkconfig's output).
func grubWords(line string) []string {
	var words []string
	var cur strings.Builder
	quote, word := byte(0), false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, word = c, true
		case c == '#' && !word:
			i = len(line)
		case c == ' ' || c == '\t' || c == ';':
			if word {
				words = append(words, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteByte(c)
			word = true
		}
	}
	if word {
		words = append(words, cur.String())
	}
	return words
}

// grubDefault follows "N", "title", "id" or "a>b" (into submenus); an
// unset or unknown default is entry 0, as in grub.
func grubDefault(menu []*grubItem, def string) *grubItem {
	items := menu
	path := strings.Split(def, ">")
	for i := 0; ; i++ {
		if len(items) == 0 {
			return nil
		}
		var pick *grubItem
		if i < len(path) {
			if n, err := strconv.Atoi(path[i]); err == nil && n >= 0 && n < len(items) {
				pick = items[n]
			}
			for _, it := range items {
				if pick == nil && (it.title == path[i] || it.id != "" && it.id == path[i]) {
					pick = it
				}
			}
		}
		if pick == nil {
			pick = items[0]
		}
		if pick.sub == nil {
			return pick
		}
		items = pick.sub
	}
}
