package main

import (
	"fmt"
	"strings"

	"github.com/aguard/aguard/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpWidth is the width help text is wrapped to.
const helpWidth = 100

// usageTemplate is cobra's usage template with aguard's flag listing
// (flagUsages) and one usage line per command.
const usageTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} <command>{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{flagUsages .LocalFlags}}{{end}}{{if .HasAvailableInheritedFlags}}

Global flags:
{{flagUsages .InheritedFlags}}{{end}}{{if .HasAvailableSubCommands}}

Run "{{.CommandPath}} <command> --help" for more about a command.{{end}}
`

func init() {
	cobra.AddTemplateFunc("flagUsages", flagUsages)
}

// flagUsages lists the flags of fs for help: each flag's long name (and
// short one), the kind of value it takes, and its meaning wrapped to
// helpWidth, followed by its default when it has one and by its environment
// variable when it has one (config.EnvAnnotation).
func flagUsages(fs *pflag.FlagSet) string {
	type entry struct{ left, text string }
	var entries []entry
	col := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		left := "      --" + f.Name
		if f.Shorthand != "" {
			left = "  -" + f.Shorthand + ", --" + f.Name
		}
		name, usage := pflag.UnquoteUsage(f)
		if name != "" {
			left += " " + name
		}
		var notes []string
		if f.DefValue != "" && !(f.Value.Type() == "bool" && f.DefValue == "false") {
			notes = append(notes, "default "+f.DefValue)
		}
		if env := f.Annotations[config.EnvAnnotation]; len(env) > 0 {
			notes = append(notes, "env "+env[0])
		}
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, "; ") + ")"
		}
		entries = append(entries, entry{left, usage})
		col = max(col, len(left))
	})
	col = min(col, 40) + 3
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.left)
		if len(e.left)+3 > col {
			b.WriteString("\n" + strings.Repeat(" ", col))
		} else {
			b.WriteString(strings.Repeat(" ", col-len(e.left)))
		}
		for i, line := range wrap(e.text, helpWidth-col) {
			if i > 0 {
				b.WriteString("\n" + strings.Repeat(" ", col))
			}
			b.WriteString(line)
		}
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// wrap breaks text into lines of at most width bytes at spaces; a word
// longer than width gets a line of its own.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	return append(lines, line)
}

// commandList renders the commands under root as the README lists them: one
// row per runnable command, its usage line and what it does.
func commandList(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| command | what it does |\n|---|---|\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			if sub.HasAvailableSubCommands() {
				walk(sub)
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s |\n", strings.ReplaceAll(sub.UseLine(), "|", `\|`), sub.Short)
		}
	}
	walk(root)
	return b.String()
}
