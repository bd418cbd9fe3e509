use super::parent::*;
use super::rank::*;
use super::*;

#[test]
fn frames_and_records_round_trip() {
    let mut buf = Vec::new();
    write_frame(&mut buf, Kind::Send, 3, 7, b"hello").unwrap();
    let f = read_frame(&mut buf.as_slice()).unwrap();
    assert_eq!(
        (f.kind, f.a, f.b, f.payload.as_slice()),
        (Kind::Send, 3, 7, &b"hello"[..])
    );
    let recs = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
    assert_eq!(
        decode_records(&encode_records(&recs), 3),
        Some(recs.clone())
    );
    assert_eq!(
        decode_records(&encode_records(&recs), 2),
        None,
        "trailing bytes"
    );
    assert_eq!(
        decode_records(&encode_records(&recs)[..5], 3),
        None,
        "short"
    );
    let mut bad = buf.clone();
    bad[4] = 99;
    assert!(read_frame(&mut bad.as_slice()).is_err());
}

#[test]
fn deaths_are_told_from_collbench_exits() {
    use std::os::unix::process::ExitStatusExt;
    let exit = |c: i32| std::process::ExitStatus::from_raw(c << 8);
    for c in [0, 1, 2, 3, 130] {
        assert_eq!(died(&exit(c)), None, "collbench's own exit {c}");
    }
    assert_eq!(
        died(&exit(101)).as_deref(),
        Some("exited with code 101, not one of collbench's")
    );
    assert_eq!(
        died(&std::process::ExitStatus::from_raw(libc::SIGKILL)).as_deref(),
        Some("killed by signal 9 (SIGKILL)")
    );
    assert_eq!(
        died(&std::process::ExitStatus::from_raw(libc::SIGSEGV | 0x80)).as_deref(),
        Some("killed by signal 11 (SIGSEGV, core dumped)")
    );
    assert_eq!(
        died(&std::process::ExitStatus::from_raw(40)).as_deref(),
        Some("killed by signal 40")
    );
}

#[test]
fn the_worst_exit_code_speaks_for_the_run() {
    assert_eq!(worst(&[0, 0, 0]), 0);
    assert_eq!(worst(&[0, 1, 3]), 3);
    assert_eq!(worst(&[2, 0, 130]), 130);
    assert_eq!(worst(&[0, 1, 0]), 1);
    assert_eq!(worst(&[0, 137]), 137);
}

/// A hub and three ranks in threads of this process: gathers complete
/// in order, messages reach their rank, and a rank that goes fails the
/// gathers it never joined at once.
#[test]
fn a_hub_serves_ranks_and_notices_one_that_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let n = 3;
    let joins: Vec<_> = (0..n)
        .map(|r| {
            let p = path.clone();
            std::thread::spawn(move || connect(r, n, &p).unwrap())
        })
        .collect();
    let mut streams: Vec<Option<UnixStream>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let (mut s, _) = listener.accept().unwrap();
        let f = read_frame(&mut s).unwrap();
        streams[f.a as usize] = Some(s);
    }
    let (tx, rx) = mpsc::channel();
    let deaths = tx.clone();
    let hub = std::thread::spawn(move || serve(streams.into_iter().flatten().collect(), tx, rx));
    let mut ranks: Vec<Procs> = joins.into_iter().map(|j| j.join().unwrap()).collect();
    assert!(ranks.iter().all(|p| p.hosts().len() == n));
    let last = ranks.pop().unwrap();
    let peer = std::thread::spawn(move || {
        let all = last.all_gather(b"two").unwrap();
        last.send(0, 9, b"from two");
        (all, last)
    });
    let others: Vec<_> = ranks
        .into_iter()
        .map(|p| {
            std::thread::spawn(move || {
                let all = p.all_gather(format!("r{}", p.rank()).as_bytes()).unwrap();
                (all, p)
            })
        })
        .collect();
    let mut ranks: Vec<Procs> = Vec::new();
    for o in others {
        let (all, p) = o.join().unwrap();
        assert_eq!(all, vec![b"r0".to_vec(), b"r1".to_vec(), b"two".to_vec()]);
        ranks.push(p);
    }
    let (_, last) = peer.join().unwrap();
    let t = Instant::now();
    let got = loop {
        if let Some(m) = ranks[0].try_receive(9) {
            break m;
        }
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(got, (2, b"from two".to_vec()));
    assert_eq!(ranks[0].try_receive(9), None);
    // The parent saw rank 2 die: every other rank hears which and how.
    let probes: Vec<_> = ranks.iter().map(Procs::lost_probe).collect();
    assert!(probes.iter().all(|p| p().is_none()), "nobody died yet");
    deaths
        .send(Event::Died(2, "killed by signal 9 (SIGKILL)".into()))
        .unwrap();
    drop(deaths);
    let t = Instant::now();
    while probes.iter().any(|p| p().is_none()) {
        assert!(t.elapsed() < Duration::from_secs(10), "not told in 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in &probes {
        assert_eq!(p(), Some((2, "killed by signal 9 (SIGKILL)".into())));
    }
    // Rank 2 goes: the others' next barrier fails at once, not at its timeout.
    drop(last);
    let t = Instant::now();
    let e = ranks[0]
        .barrier(Duration::from_secs(30), &|| false)
        .unwrap_err();
    assert!(e.0.contains("rank 2 exited"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10));
    drop(ranks);
    hub.join().unwrap();
}

#[test]
fn the_same_error_is_said_once_between_ranks() {
    use std::sync::atomic::AtomicU64;
    let table: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
    let line = "collbench: error: it cannot run here\n";
    assert!(first_to_say(&table, line), "the first says it");
    assert!(!first_to_say(&table, line), "the next keeps quiet");
    for k in 1..=3 {
        assert!(
            first_to_say(&table, &format!("rank {k}: other words\n")),
            "other words are said"
        );
    }
    // A full table: every new line is said, those in it still once.
    assert!(first_to_say(&table, "a fifth line\n"));
    assert!(first_to_say(&table, "a fifth line\n"));
    assert!(!first_to_say(&table, line));
}
