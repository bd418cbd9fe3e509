//! Tables for people that are not the streamed sweep table (compare's
//! pairs, qualify's verdicts, `collbench info`): comfy-table, plain. No
//! borders, rules or colour, whatever the terminal or `NO_COLOR` say:
//! columns a gap apart, each as wide as its widest cell, trailing spaces
//! trimmed, so the text pipes and diffs cleanly.

pub use comfy_table::Table;
use comfy_table::{presets, CellAlignment};

/// An empty plain table; add a header and rows, then [`render`] it.
pub fn plain() -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING).force_no_tty();
    t
}

/// The table as text, a newline after every line: columns `gap` spaces
/// apart, those in `right` aligned right (numbers), the others left.
pub fn render(mut table: Table, right: &[usize], gap: u16) -> String {
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, gap));
        if right.contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut text = String::new();
    for line in table.lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_with_no_decoration() {
        let mut t = plain();
        t.set_header(vec!["a", "1", "x"]);
        t.add_row(vec!["bbb", "100"]);
        assert_eq!(render(t, &[1], 2), "a      1  x\nbbb  100\n");
    }

    #[test]
    fn no_escape_codes() {
        let mut t = plain();
        t.set_header(vec!["h"]);
        t.add_row(vec![comfy_table::Cell::new("v")]);
        let text = render(t, &[], 2);
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert_eq!(text, "h\nv\n");
    }
}
