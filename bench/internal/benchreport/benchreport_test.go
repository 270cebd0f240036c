package benchreport

import "testing"

func TestReplaceSection(t *testing.T) {
	const section = "## Writer\n\nnew figures\n"
	for _, tc := range []struct{ name, doc, want string }{
		{
			name: "empty file gets a title",
			doc:  "",
			want: "# Benchmark results\n\nFigures from the programs in `bench/`; each replaces its own section when rerun.\n\n" + section,
		},
		{
			name: "appended after other sections",
			doc:  "# Results\n\n## Relay\n\nrelay figures\n",
			want: "# Results\n\n## Relay\n\nrelay figures\n\n" + section,
		},
		{
			name: "replaced in the middle, subsections and fenced headings included",
			doc:  "# Results\n\n## Writer\n\nold\n\n### Old sub\n\n```\n## not a heading\n```\n\n## Relay\n\nrelay figures\n",
			want: "# Results\n\n" + section + "\n## Relay\n\nrelay figures\n",
		},
		{
			name: "replaced at the end",
			doc:  "# Results\n\n## Relay\n\nx\n\n## Writer\n\nold\n",
			want: "# Results\n\n## Relay\n\nx\n\n" + section,
		},
		{
			name: "a longer title is another section",
			doc:  "# Results\n\n## Writer latency\n\nx\n",
			want: "# Results\n\n## Writer latency\n\nx\n\n" + section,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReplaceSection(tc.doc, "Writer", section); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
