//! JUnit XML for `collbench qualify --junit`: one testsuite, one testcase
//! per check; a check that missed a threshold has a `failure` whose message
//! holds the numbers, one that could not run an `error`; the measured
//! against expected lines are in `system-out`. CI systems (GitLab, Jenkins,
//! GitHub test reporters) read this shape.

use super::qualify::{CheckResult, Outcome};
use std::fmt::Write as _;

/// `s` with XML's special characters escaped (attribute-safe).
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            c if (c as u32) < 0x20 && c != '\t' => {}
            // Characters XML 1.0 forbids (no reader takes them escaped
            // either), shown as the replacement character.
            '\u{FFFE}' | '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Measured against expected, one line per threshold, and the re-run.
fn details(r: &CheckResult) -> String {
    let lines: Vec<String> = r
        .measured
        .iter()
        .map(|m| {
            format!(
                "{}: measured {}, expected {} ({}){}",
                m.metric,
                m.value(),
                m.expected(),
                m.at,
                if m.ok { "" } else { " FAILED" }
            )
        })
        .chain(r.retried.then(|| "failed once and was re-run".to_string()))
        .collect();
    lines.join("\n")
}

/// One `<testcase>` element.
fn testcase(r: &CheckResult) -> String {
    let mut x = format!(
        "    <testcase name=\"{}\" classname=\"collbench.qualify.{}\" time=\"{:.3}\">\n",
        xml_escape(&r.title),
        xml_escape(&r.collective),
        r.seconds
    );
    let details = xml_escape(&details(r));
    match &r.outcome {
        Outcome::Passed => {}
        Outcome::Failed(why) => {
            let _ = writeln!(
                x,
                "      <failure message=\"{}\" type=\"threshold\">{details}</failure>",
                xml_escape(why)
            );
        }
        Outcome::Error(why) => {
            let _ = writeln!(
                x,
                "      <error message=\"{}\" type=\"cannot-run\"/>",
                xml_escape(why)
            );
        }
    }
    if !details.is_empty() {
        let _ = writeln!(x, "      <system-out>{details}</system-out>");
    }
    x.push_str("    </testcase>\n");
    x
}

/// JUnit XML: one testsuite named `suite`, one testcase per check, with a
/// `failure` (thresholds missed, numbers in the message) or `error` (could
/// not run) element, and the measured-against-expected lines in `system-out`.
/// `timestamp`: RFC 3339 UTC.
pub fn junit(suite: &str, hostname: &str, timestamp: &str, results: &[CheckResult]) -> String {
    let count = |f: fn(&Outcome) -> bool| results.iter().filter(|r| f(&r.outcome)).count();
    let failures = count(|o| matches!(o, Outcome::Failed(_)));
    let errors = count(|o| matches!(o, Outcome::Error(_)));
    let time: f64 = results.iter().map(|r| r.seconds).sum();
    let counts = format!(
        "tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.3}\"",
        results.len()
    );
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(x, "<testsuites name=\"collbench qualify\" {counts}>");
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" {counts} skipped=\"0\" timestamp=\"{}\" hostname=\"{}\">",
        xml_escape(suite),
        xml_escape(timestamp.trim_end_matches('Z')),
        xml_escape(hostname)
    );
    for r in results {
        x.push_str(&testcase(r));
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::qualify::tests::results;

    #[test]
    fn junit_has_one_case_per_check_and_the_numbers() {
        let x = junit("spec.toml", "node1", "2026-11-21T20:00:00Z", &results());
        assert!(
            x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"),
            "{x}"
        );
        assert!(
            x.contains("tests=\"3\" failures=\"1\" errors=\"1\" time=\"1.750\""),
            "{x}"
        );
        assert_eq!(x.matches("<testcase ").count(), 3);
        assert_eq!(x.matches("<failure ").count(), 1);
        assert_eq!(x.matches("<error ").count(), 1);
        assert!(
            x.contains("name=\"a &lt;b&gt; &amp; &quot;c&quot;\""),
            "{x}"
        );
        assert!(
            x.contains("busbw 157.286 GB/s (expected &gt;= 100000 GB/s)"),
            "{x}"
        );
        assert!(x.contains("failed once and was re-run"), "{x}");
        assert!(x.contains("timestamp=\"2026-11-21T20:00:00\""), "{x}");
        assert_eq!(x.matches("<testsuite ").count(), 1);
        assert!(x.trim_end().ends_with("</testsuites>"));
    }

    /// Every character XML 1.0 forbids is kept out: controls but tab and
    /// newline are dropped, U+FFFE and U+FFFF become U+FFFD.
    #[test]
    fn characters_xml_forbids_never_reach_the_file() {
        let escaped = xml_escape("a\u{1}b\u{FFFE}c\u{FFFF}d\te\nf\u{10FFFF}");
        assert_eq!(escaped, "ab\u{FFFD}c\u{FFFD}d\te&#10;f\u{10FFFF}");
        let allowed = |c: char| {
            matches!(c, '\t' | '\n' | '\r')
                || ('\u{20}'..='\u{D7FF}').contains(&c)
                || ('\u{E000}'..='\u{FFFD}').contains(&c)
                || c >= '\u{10000}'
        };
        let every: String = (0..=0x10FFFF).filter_map(char::from_u32).collect();
        assert!(xml_escape(&every).chars().all(allowed));
    }
}
