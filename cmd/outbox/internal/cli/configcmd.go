package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// configCommand is `outbox config`: the effective configuration and where each value
// came from, secrets masked.
func (a *app) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (every key, its value and its source; secrets masked)",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(w, "KEY\tVALUE\tSOURCE")
			for _, o := range options {
				s, ok := a.cfg.origin[o.key]
				switch {
				case !ok:
					s = setting{value: "", source: "unset"}
				case o.secret && s.value != "":
					s.value = redacted
				}
				_, _ = fmt.Fprintf(w, "%s\t%s\t%s\n", o.key, s.value, s.source)
			}
			return w.Flush()
		},
	}
	addFlags(cmd.Flags(), scopeRelay)
	return cmd
}
