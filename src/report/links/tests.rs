use super::*;

const SIZE: u64 = 16 << 20;

fn pair(from: usize, to: usize, gbps: f64) -> LinkPair {
    LinkPair {
        from,
        to,
        bytes: SIZE,
        gbps,
        wait_us: 10.0,
        transfer_us: 30.0,
    }
}

/// Deterministic numbers in [0, 1) (xorshift64).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `center` within +-`spread` (a share of it).
    fn around(&mut self, center: f64, spread: f64) -> f64 {
        center * (1.0 + spread * (2.0 * self.next() - 1.0))
    }
}

/// Each rank sends to the next.
fn ring(n: usize, mut gbps: impl FnMut(usize, usize) -> f64) -> Vec<LinkPair> {
    (0..n)
        .map(|i| pair(i, (i + 1) % n, gbps(i, (i + 1) % n)))
        .collect()
}

/// Every rank sends to every other.
fn all_to_all(n: usize, mut gbps: impl FnMut(usize, usize) -> f64) -> Vec<LinkPair> {
    let mut out = Vec::new();
    for from in 0..n {
        for to in (0..n).filter(|&to| to != from) {
            out.push(pair(from, to, gbps(from, to)));
        }
    }
    out
}

fn judged(pairs: Vec<LinkPair>) -> LinkReport {
    judge(SIZE, pairs, &Thresholds::default())
}

#[test]
fn one_slow_link_in_a_ring_is_found_and_nothing_else() {
    let mut noise = Noise(7);
    let pairs = ring(8, |from, _| {
        if from == 2 {
            1.1
        } else {
            noise.around(4.6, 0.05)
        }
    });
    let r = judged(pairs);
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(f.kind, SLOW_LINK);
    assert_eq!((f.from, f.to, f.rank), (Some(2), Some(3), None));
    assert_eq!(f.gbps, 1.1);
    assert!((f.median_gbps - 4.6).abs() < 0.25, "{}", f.median_gbps);
    assert!(f
        .detail
        .starts_with("slow link 2 -> 3: 1.1 GB/s vs median "));
}

#[test]
fn healthy_noisy_links_make_no_finding() {
    for seed in 1..=50 {
        let mut noise = Noise(seed * 0x9e37_79b9);
        let r = judged(all_to_all(8, |_, _| noise.around(5.0, 0.15)));
        assert_eq!(r.pairs.len(), 56);
        assert!(r.findings.is_empty(), "seed {seed}: {:#?}", r.findings);
        let r = judged(ring(8, |_, _| noise.around(5.0, 0.15)));
        assert!(r.findings.is_empty(), "seed {seed}: {:#?}", r.findings);
    }
}

#[test]
fn fast_links_and_equal_links_are_not_findings() {
    let r = judged(ring(8, |from, _| if from == 4 { 15.0 } else { 5.0 }));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    let r = judged(all_to_all(4, |_, _| 5.0));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
}

#[test]
fn a_link_a_little_slow_is_noise_however_tight_the_others() {
    // 0.8x the median: far out by the z-score (the others agree to 1%),
    // but within the minimum gap.
    let mut noise = Noise(3);
    let r = judged(ring(8, |from, _| {
        if from == 0 {
            4.0
        } else {
            noise.around(5.0, 0.01)
        }
    }));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
}

#[test]
fn equal_links_decide_by_the_gap_alone() {
    // MAD 0: the z-score is undefined; the gap finds the slow link.
    let r = judged(ring(8, |from, _| if from == 2 { 1.1 } else { 4.6 }));
    assert_eq!(r.findings.len(), 1);
    assert_eq!(
        r.findings[0].detail,
        "slow link 2 -> 3: 1.1 GB/s vs median 4.6 GB/s (4.2x)"
    );
}

#[test]
fn a_rank_whose_every_outgoing_link_is_slow_is_named_once() {
    let mut noise = Noise(11);
    let slow = [0.9, 1.2, 1.0, 1.1, 1.05];
    let mut k = 0;
    let pairs = all_to_all(6, |from, _| {
        if from == 5 {
            k += 1;
            slow[k - 1]
        } else {
            noise.around(4.6, 0.1)
        }
    });
    assert_eq!(pairs.len(), 30);
    let r = judged(pairs);
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(f.kind, SLOW_RANK);
    assert_eq!((f.rank, f.from, f.to), (Some(5), None, None));
    assert_eq!(f.gbps, 0.9);
    assert!(
        f.detail
            .starts_with("slow rank 5: its 5 outgoing links 0.9-1.2 GB/s vs median "),
        "{}",
        f.detail
    );
}

#[test]
fn the_slow_rank_detail_formats() {
    let slow = [0.9, 1.0, 1.1, 1.2, 1.2];
    let mut k = 0;
    let r = judged(all_to_all(6, |from, _| {
        if from == 5 {
            k += 1;
            slow[k - 1]
        } else {
            4.6
        }
    }));
    assert_eq!(r.findings.len(), 1);
    assert_eq!(
        r.findings[0].detail,
        "slow rank 5: its 5 outgoing links 0.9-1.2 GB/s vs median 4.6 GB/s (3.8x)"
    );
}

#[test]
fn one_slow_link_of_a_rank_stays_a_link() {
    let mut noise = Noise(5);
    let r = judged(all_to_all(6, |from, to| {
        if (from, to) == (3, 1) {
            0.8
        } else {
            noise.around(4.6, 0.1)
        }
    }));
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(
        (f.kind.as_str(), f.from, f.to, f.rank),
        (SLOW_LINK, Some(3), Some(1), None)
    );
}

#[test]
fn a_rank_with_one_measured_link_is_never_named() {
    // In a ring each rank sends to one peer: a slow one is a link.
    let r = judged(ring(4, |from, _| if from == 1 { 1.0 } else { 5.0 }));
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].kind, SLOW_LINK);
}

#[test]
fn findings_are_worst_first_and_pairs_sorted() {
    let mut pairs = ring(8, |from, _| match from {
        1 => 2.0,
        6 => 0.5,
        _ => 5.0,
    });
    pairs.reverse();
    let r = judged(pairs);
    let order: Vec<_> = r.findings.iter().map(|f| (f.from, f.gbps)).collect();
    assert_eq!(order, [(Some(6), 0.5), (Some(1), 2.0)]);
    let keys: Vec<_> = r.pairs.iter().map(|p| (p.from, p.to)).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[test]
fn fewer_than_three_links_give_no_verdict() {
    let r = judged(vec![pair(0, 1, 5.0), pair(1, 0, 0.1)]);
    assert!(r.findings.is_empty());
    let text = render(&r, 2);
    assert!(
        text.ends_with("no verdict: 2 link(s) measured, 3 or more are needed\n"),
        "{text}"
    );
    // Unmeasured pairs and a rank to itself do not count.
    let r = judged(vec![
        pair(0, 1, 5.0),
        pair(1, 2, 0.0),
        pair(2, 2, 9.0),
        pair(2, 0, 0.5),
    ]);
    assert!(r.findings.is_empty());
    // A floor needs no verdict's count: its findings are listed (the run
    // exits 1 on them).
    let mut r = judged(vec![pair(0, 1, 5.0), pair(1, 0, 0.1)]);
    add_floor_findings(&mut r, 1.0);
    let text = render(&r, 2);
    assert!(
        text.ends_with("slow link 1 -> 0: 0.1 GB/s, below --min-link-gbps 1 (median 2.5 GB/s)\n"),
        "{text}"
    );
}

#[test]
fn numbers_json_cannot_hold_are_kept_as_zero() {
    let mut p = pair(0, 1, f64::INFINITY);
    p.wait_us = f64::NAN;
    p.transfer_us = -1.0;
    let r = judged(vec![p, pair(1, 2, 5.0), pair(2, 0, 5.0), pair(0, 2, 5.0)]);
    let p = &r.pairs[0];
    assert_eq!((p.gbps, p.wait_us, p.transfer_us), (0.0, 0.0, 0.0));
    assert!(!p.measured() && p.wait_share().is_none());
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(serde_json::from_str::<LinkReport>(&text).unwrap(), r);
}

#[test]
fn gbps_text_keeps_two_digits_when_small() {
    assert_eq!(gbps_text(4.56), "4.6");
    assert_eq!(gbps_text(152.34), "152.3");
    assert_eq!(gbps_text(0.1), "0.1");
    assert_eq!(gbps_text(0.05), "0.050");
    assert_eq!(gbps_text(0.00042), "0.00042");
    assert_eq!(gbps_text(0.0), "0.0");
}

#[test]
fn render_draws_both_matrices_and_the_findings() {
    let mut pairs = ring(4, |from, _| if from == 2 { 1.1 } else { 4.6 });
    pairs[3].wait_us = 0.0;
    pairs[3].transfer_us = 0.0;
    let r = judged(pairs);
    let text = render(&r, 4);
    let want = "\
# links at 16MiB (GB/s per directed link, sender rows, receiver columns; wait share in the second matrix)
from\\to    0     1     2     3
      0    -   4.6     .     .
      1    .     -   4.6     .
      2    .     .     -   1.1*
      3  4.6     .     .     -
# wait share: % of each link's time its receiver waited for data
from\\to  0     1     2     3
      0  -   25%     .     .
      1  .     -   25%     .
      2  .     .     -   25%*
      3  .     .     .     -
slow link 2 -> 3: 1.1 GB/s vs median 4.6 GB/s (4.2x)
";
    assert_eq!(text, want, "\n{text}");
}

#[test]
fn render_without_findings_says_so() {
    let r = judged(ring(3, |_, _| 5.0));
    let text = render(&r, 3);
    assert!(text.contains("\n      0    -  5.0    .\n"), "{text}");
    assert!(text.contains("\n      2  25%    .    -\n"), "{text}");
    assert!(
        text.ends_with("no slow link or rank (3 links, median 5.0 GB/s, spread 5.0-5.0 GB/s)\n"),
        "{text}"
    );
}

#[test]
fn wide_worlds_list_the_slowest_links() {
    let r = judged(ring(40, |from, _| if from == 7 { 1.0 } else { 5.0 }));
    let text = render(&r, 40);
    assert!(text.starts_with("# links at 16MiB (GB/s per directed link; 40 ranks:"));
    assert!(
        text.contains("\n  7 -> 8: 1.0 GB/s, receiver waited 25%\n"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1 + 10 + 1);
    assert!(text.ends_with("slow link 7 -> 8: 1.0 GB/s vs median 5.0 GB/s (5.0x)\n"));
}

#[test]
fn json_round_trips_with_the_contract_names() {
    let r = judged(all_to_all(
        3,
        |from, to| if (from, to) == (0, 1) { 1.0 } else { 5.0 },
    ));
    assert_eq!(r.findings.len(), 1);
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["bytes"], SIZE);
    let p = v["pairs"][0].as_object().unwrap();
    let mut keys: Vec<&str> = p.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        ["bytes", "from", "gbps", "to", "transfer_us", "wait_us"]
    );
    let f = v["findings"][0].as_object().unwrap();
    let mut keys: Vec<&str> = f.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "detail",
            "from",
            "gbps",
            "kind",
            "median_gbps",
            "rank",
            "to"
        ]
    );
    assert_eq!(f["kind"], "slow-link");
    assert_eq!((&f["from"], &f["to"]), (&0.into(), &1.into()));
    assert!(f["rank"].is_null());
    let back: LinkReport = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
}

#[test]
fn results_read_back_with_and_without_links() {
    use crate::report::fixtures::{results, row};
    let mut with = results(vec![row(SIZE, "out")]);
    let plain = serde_json::to_string(&with).unwrap();
    assert!(!plain.contains("\"links\""));
    let back: crate::report::Results = serde_json::from_str(&plain).unwrap();
    assert_eq!(back.links, None);
    with.links = Some(judged(ring(4, |from, _| if from == 0 { 1.0 } else { 5.0 })));
    let text = serde_json::to_string(&with).unwrap();
    assert!(text.contains("\"links\":{\"bytes\":16777216,\"pairs\":[{\"from\":0,"));
    let back: crate::report::Results = serde_json::from_str(&text).unwrap();
    assert_eq!(back.links, with.links);
}

#[test]
fn heatmap_writes_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let r = judged(all_to_all(6, |from, _| if from == 5 { 1.0 } else { 4.6 }));
    let png = dir.path().join("links.png");
    plot_heatmap(&r, 6, &png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000);
    let svg = dir.path().join("links.svg");
    plot_heatmap(&r, 6, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    for want in [
        "links at 16MiB",
        "receiver",
        "sender",
        "slow rank 5",
        "4.6",
        "GB/s",
    ] {
        assert!(text.contains(want), "missing '{want}'");
    }
}

#[test]
fn heatmap_refuses_bad_names_and_nothing_measured() {
    let dir = tempfile::tempdir().unwrap();
    let r = judged(ring(4, |_, _| 5.0));
    let e = plot_heatmap(&r, 4, &dir.path().join("x.jpg")).unwrap_err();
    assert!(e.to_string().ends_with("must end in .png or .svg"), "{e}");
    let e = plot_heatmap(&LinkReport::default(), 4, &dir.path().join("x.svg")).unwrap_err();
    assert!(e.to_string().contains("no link was measured"), "{e}");
    // A large world draws, without values in its cells.
    let big = judged(ring(64, |from, _| if from == 9 { 1.0 } else { 5.0 }));
    plot_heatmap(&big, 64, &dir.path().join("big.png")).unwrap();
}

/// Receivers that differ (half the ranks take data at 16 GB/s, half at 13,
/// as a direct all-to-all's step groups make them) spread the links too
/// wide for one median: links are judged against their receiver's, and a
/// sender 3x slower everywhere is still named, while the healthy matrix
/// stays quiet.
#[test]
fn receivers_that_differ_do_not_hide_a_slow_rank() {
    let mut noise = Noise(11);
    let speed = |to: usize| if to % 2 == 0 { 16.0 } else { 13.0 };
    let slow = all_to_all(6, |from, to| {
        let g = noise.around(speed(to), 0.05);
        if from == 5 {
            g / 3.0
        } else {
            g
        }
    });
    let r = judged(slow);
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    assert_eq!(r.findings[0].kind, SLOW_RANK);
    assert_eq!(r.findings[0].rank, Some(5));
    let healthy = all_to_all(6, |_, to| noise.around(speed(to), 0.05));
    assert!(judged(healthy).findings.is_empty());
}

/// A GB/s matrix as `--links` prints it (rows send, columns receive; `-` on
/// the diagonal), as pairs.
fn from_matrix(rows: &[[f64; 6]; 6]) -> Vec<LinkPair> {
    let mut pairs = Vec::new();
    for (from, row) in rows.iter().enumerate() {
        for (to, &gbps) in row.iter().enumerate() {
            if from != to {
                pairs.push(pair(from, to, gbps));
            }
        }
    }
    pairs
}

#[test]
fn an_h100_all_to_all_with_a_slowed_rank_names_the_rank_alone() {
    // Measured on one H100 (2026-11-22): 6 virtual ranks, all-to-all of
    // 64 MiB, `--inject slow:rank=5,factor=3`. Two of rank 5's links are
    // under 3x the median, so no rule on single links names it whole.
    let slowed = [
        [0.0, 14.8, 15.6, 15.1, 15.8, 12.5],
        [10.3, 0.0, 12.1, 15.4, 14.0, 12.0],
        [15.6, 12.1, 0.0, 14.0, 14.3, 15.1],
        [12.7, 12.2, 10.4, 0.0, 13.4, 12.1],
        [15.6, 16.8, 15.6, 12.9, 0.0, 16.9],
        [4.0, 3.9, 4.3, 5.1, 3.7, 0.0],
    ];
    let r = judged(from_matrix(&slowed));
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!((f.kind.as_str(), f.rank), (SLOW_RANK, Some(5)));
    assert!(
        f.detail
            .starts_with("slow rank 5: its 5 outgoing links 3.7-5.1 GB/s vs median "),
        "{}",
        f.detail
    );
    // The same run without the injection: nothing.
    let healthy = [
        [0.0, 13.1, 11.6, 10.9, 11.0, 10.7],
        [9.3, 0.0, 10.7, 10.0, 9.3, 9.3],
        [10.7, 10.5, 0.0, 12.2, 11.4, 10.3],
        [9.4, 9.3, 9.3, 0.0, 10.3, 9.8],
        [12.0, 10.8, 10.7, 10.6, 0.0, 12.5],
        [10.6, 9.8, 9.3, 9.2, 9.3, 0.0],
    ];
    let r = judged(from_matrix(&healthy));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
}

#[test]
fn a_rank_is_named_only_when_every_link_is_slow() {
    let mut noise = Noise(17);
    // Every link 2.2-2.8x slow (under the strong gap, within the others'
    // noise for a z-score over 30 links): the sender is slow as a whole.
    let r = judged(all_to_all(6, |from, _| {
        if from == 2 {
            noise.around(1.8, 0.12)
        } else {
            noise.around(4.6, 0.15)
        }
    }));
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    assert_eq!(r.findings[0].rank, Some(2));
    // Three of five slow, two healthy: its median is slow, but a rank is
    // named only for all its links; the slow ones are links.
    let r = judged(all_to_all(6, |from, to| {
        if from == 2 && to < 4 {
            noise.around(1.0, 0.05)
        } else {
            noise.around(4.6, 0.1)
        }
    }));
    assert!(
        r.findings.iter().all(|f| f.kind == SLOW_LINK),
        "{:#?}",
        r.findings
    );
    assert_eq!(r.findings.len(), 3, "{:#?}", r.findings);
}

#[test]
fn a_collective_beside_the_matrix_is_told_in_one_line() {
    let c = CaseLinks {
        collective: "all-reduce".into(),
        algo: "ring".into(),
        bytes: SIZE,
        pairs: ring(4, |from, _| if from == 1 { 2.5 } else { 9.0 }),
    };
    assert_eq!(
        render_case(&c),
        "# all-reduce ring at 16MiB: 4 links, median 9.0 GB/s, 2.5-9.0 GB/s, slowest 1 -> 2\n"
    );
    let none = CaseLinks { pairs: vec![], ..c };
    assert_eq!(
        render_case(&none),
        "# all-reduce ring at 16MiB: no link measured\n"
    );
}

#[test]
fn a_link_slow_only_for_its_fast_round_is_no_finding() {
    // Measured (2 cores, 6 host ranks, link 1 -> 4 slowed 4x): round 3
    // pairs ranks sending to each other, twice as fast as the others; 4 -> 1
    // is held back by the slowed 1 -> 4 to 16.5 GB/s, slow for its round but
    // not for the machine (median 14.7 GB/s).
    let m = [
        [0.0, 14.7, 14.5, 28.0, 15.4, 14.5],
        [14.8, 0.0, 14.3, 14.5, 3.7, 14.2],
        [15.4, 14.8, 0.0, 14.6, 14.3, 27.5],
        [27.3, 14.1, 14.9, 0.0, 14.3, 14.5],
        [14.4, 16.5, 15.3, 15.0, 0.0, 14.2],
        [14.3, 14.7, 27.6, 14.2, 14.8, 0.0],
    ];
    let t = Thresholds {
        rounds: Some(6),
        ..Thresholds::default()
    };
    let r = judge(SIZE, from_matrix(&m), &t);
    let named: Vec<&str> = r.findings.iter().map(|f| f.detail.as_str()).collect();
    assert_eq!(
        named,
        ["slow link 1 -> 4: 3.7 GB/s vs median 14.6 GB/s (4.0x)"]
    );
}

#[test]
fn a_link_slow_only_for_its_fast_receiver_is_no_finding() {
    // Measured (2 cores, 6 host ranks, all-to-all of 6 MiB, link 1 -> 4
    // slowed 4x): 1 -> 0 ran at 0.62 of what rank 0 received from the
    // others, but at 0.9 of the machine's median; its receiver never waited
    // for it (a copy descheduled, not a slow link).
    let m = [
        [0.0, 21.5, 16.1, 24.0, 15.8, 15.8],
        [15.5, 0.0, 25.8, 26.9, 3.9, 16.1],
        [22.3, 21.6, 0.0, 25.3, 17.1, 17.5],
        [25.1, 24.5, 16.5, 0.0, 17.9, 16.4],
        [24.9, 17.2, 15.6, 19.1, 0.0, 16.9],
        [24.9, 24.4, 15.7, 22.1, 16.1, 0.0],
    ];
    let r = judged(from_matrix(&m));
    let named: Vec<&str> = r.findings.iter().map(|f| f.detail.as_str()).collect();
    assert_eq!(
        named,
        ["slow link 1 -> 4: 3.9 GB/s vs median 17.7 GB/s (4.5x)"]
    );
}

#[test]
fn where_ranks_share_cpus_a_finding_needs_twice_the_median() {
    // Measured (2 cores, 6 host ranks, all-to-all of 6 MiB, nothing
    // slowed): four links 1.5-1.7x below the median.
    let m = [
        [0.0, 22.3, 30.4, 32.4, 26.8, 31.6],
        [29.4, 0.0, 31.6, 29.7, 17.8, 28.8],
        [29.2, 16.8, 0.0, 31.9, 32.2, 31.5],
        [29.4, 18.3, 31.5, 0.0, 31.1, 30.7],
        [31.5, 17.6, 29.1, 17.2, 0.0, 33.3],
        [19.5, 19.8, 32.1, 18.7, 25.7, 0.0],
    ];
    assert_eq!(judged(from_matrix(&m)).findings.len(), 4);
    let crowded = Thresholds::default().crowded();
    assert_eq!(crowded.min_gap, CROWDED_MIN_GAP);
    let r = judge(SIZE, from_matrix(&m), &crowded);
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    // A link 2x slow is still named there.
    let mut slowed = m;
    slowed[2][4] = 12.0;
    let r = judge(SIZE, from_matrix(&slowed), &crowded);
    let named: Vec<&str> = r.findings.iter().map(|f| f.detail.as_str()).collect();
    assert_eq!(
        named,
        ["slow link 2 -> 4: 12.0 GB/s vs median 29.3 GB/s (2.4x)"]
    );
}
