//! Writing dumps: one `collbench.fr/1` JSON file per rank, written
//! atomically (temporary file, then rename) so a reader never sees half a
//! dump. Files are named by the run's id and the rank
//! (`<run_id>-rank<N>.json`; SIGUSR1 snapshots `<run_id>-rank<N>-request<K>.json`,
//! K = 1, 2, ...), so runs sharing a folder never overwrite or mix with
//! each other, and every snapshot is kept.

use super::model::{Clocks, Dump, Group, PeerLost, DUMP_SCHEMA};
use super::{mono_ns, wall_ns, RankRecorder};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What every dump of a run shares.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    /// The run's id (`<rfc3339>-<pid>` of rank 0's process): every dump
    /// of the run carries it, in the file and in its name.
    pub run_id: String,
    pub host: String,
    pub world_size: usize,
    pub device: String,
    pub command: String,
    pub version: String,
}

/// Why a dump is written: the dump's `reason`, and for `peer-lost` the
/// rank whose process died.
#[derive(Clone, Copy, Debug)]
pub struct Why<'a> {
    pub reason: &'a str,
    pub lost: Option<&'a PeerLost>,
}

impl<'a> Why<'a> {
    pub fn new(reason: &'a str) -> Why<'a> {
        Why { reason, lost: None }
    }

    /// A dump written because rank `lost`'s process died.
    pub fn lost(lost: &'a PeerLost) -> Why<'a> {
        Why {
            reason: REASON_PEER_LOST,
            lost: Some(lost),
        }
    }
}

/// The reason of a dump written because another rank's process died.
pub const REASON_PEER_LOST: &str = "peer-lost";

/// The dump of one rank now.
pub fn snapshot_of(rec: &RankRecorder, info: &RunInfo, why: Why) -> Dump {
    Dump {
        schema: DUMP_SCHEMA.into(),
        run_id: Some(info.run_id.clone()).filter(|id| !id.is_empty()),
        host: info.host.clone(),
        pid: std::process::id(),
        rank: rec.rank,
        world_size: info.world_size,
        device: info.device.clone(),
        command: info.command.clone(),
        version: info.version.clone(),
        reason: why.reason.into(),
        lost: why.lost.cloned(),
        clocks: Clocks {
            wall_ns: wall_ns(),
            mono_ns: mono_ns(),
        },
        capacity: rec.capacity(),
        groups: vec![Group {
            name: super::WORLD_GROUP.into(),
            ranks: (0..info.world_size).collect(),
        }],
        // Read after the entries: at least as new as they are.
        entries: rec.snapshot(),
        status: rec.status(),
    }
}

/// The file name of rank `rank`'s dump in run `run_id`; `snapshot`: the
/// number of a SIGUSR1 snapshot (from 1), `None` for the dump that ends a
/// run (hang, signal). Without a run id: `rank<N>.json`, as before ids.
pub fn file_name(run_id: &str, rank: usize, snapshot: Option<u32>) -> String {
    let run = if run_id.is_empty() {
        String::new()
    } else {
        format!("{run_id}-")
    };
    match snapshot {
        Some(k) => format!("{run}rank{rank}-request{k}.json"),
        None => format!("{run}rank{rank}.json"),
    }
}

/// Writes every recorder's dump into `dir` (named by [`file_name`]);
/// returns the paths.
pub fn write_all(
    dir: &Path,
    recs: &[std::sync::Arc<RankRecorder>],
    info: &RunInfo,
    why: Why,
    snapshot: Option<u32>,
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    // The rename alone keeps readers from half a dump. A hang's dumps are
    // the evidence a node's reboot must not lose: those reach the disk
    // first. A signal's and a snapshot's do not wait for it (an fsync on a
    // busy disk takes seconds, and SIGKILL follows SIGTERM soon).
    let durable = why.reason == "timeout" || why.reason == REASON_PEER_LOST;
    recs.iter()
        .map(|r| {
            let name = file_name(&info.run_id, r.rank, snapshot);
            let path = dir.join(&name);
            let bytes = serde_json::to_vec_pretty(&snapshot_of(r, info, why))?;
            let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
            let written = std::fs::File::create(&tmp).and_then(|mut f| {
                f.write_all(&bytes)?;
                if durable {
                    f.sync_all()?;
                }
                std::fs::rename(&tmp, &path)
            });
            if written.is_err() {
                // A full or read-only folder keeps no half dump.
                let _ = std::fs::remove_file(&tmp);
            }
            written.map(|()| path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::model::{IterKind, State};
    use super::super::OpInfo;
    use super::*;
    use std::sync::Arc;

    /// A dump that cannot be put in place (here its name is a folder; a
    /// full or read-only disk alike) fails, leaving no temporary file.
    #[test]
    fn a_dump_that_cannot_be_written_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let recs = vec![Arc::new(RankRecorder::new(0, 8))];
        let info = RunInfo {
            world_size: 1,
            ..RunInfo::default()
        };
        let taken = dir.path().join(file_name(&info.run_id, 0, None));
        std::fs::create_dir_all(taken.join("inside")).unwrap();
        assert!(write_all(dir.path(), &recs, &info, Why::new("timeout"), None).is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, [taken.file_name().unwrap().to_string_lossy()]);
    }

    #[test]
    fn dumps_are_complete_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let recs: Vec<_> = (0..2).map(|r| Arc::new(RankRecorder::new(r, 8))).collect();
        let op = OpInfo {
            group: "0",
            collective: "all-reduce",
            bytes: 64,
            ..OpInfo::default()
        };
        for r in &recs {
            r.enter(&op, IterKind::Warmup);
        }
        let info = RunInfo {
            world_size: 2,
            host: "h".into(),
            ..RunInfo::default()
        };
        let paths = write_all(dir.path(), &recs, &info, Why::new("timeout"), None).unwrap();
        assert_eq!(paths.len(), 2);
        assert_eq!(
            paths[1],
            dir.path().join("rank1.json"),
            "no run id: old names"
        );
        let d: Dump = serde_json::from_slice(&std::fs::read(&paths[1]).unwrap()).unwrap();
        assert_eq!(
            (d.schema.as_str(), d.rank, d.world_size, d.reason.as_str()),
            (DUMP_SCHEMA, 1, 2, "timeout")
        );
        assert_eq!(d.run_id, None);
        assert_eq!(d.entries[0].state, State::Started);
        assert_eq!(d.groups[0].ranks, vec![0, 1]);
        assert!(d.clocks.wall_ns > 0 && d.clocks.mono_ns > 0);
    }

    #[test]
    fn every_run_and_snapshot_has_its_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let recs: Vec<_> = (0..2).map(|r| Arc::new(RankRecorder::new(r, 8))).collect();
        let info = |id: &str| RunInfo {
            run_id: id.into(),
            world_size: 2,
            ..RunInfo::default()
        };
        let a = info("2026-11-05T101010Z-17");
        let first = write_all(dir.path(), &recs, &a, Why::new("request"), Some(1)).unwrap();
        let second = write_all(dir.path(), &recs, &a, Why::new("request"), Some(2)).unwrap();
        let last = write_all(dir.path(), &recs, &a, Why::new("signal"), None).unwrap();
        let other = write_all(
            dir.path(),
            &recs[..1],
            &info("x-18"),
            Why::new("timeout"),
            None,
        )
        .unwrap();
        assert_eq!(
            first[0].file_name().unwrap(),
            "2026-11-05T101010Z-17-rank0-request1.json"
        );
        assert_eq!(
            second[1].file_name().unwrap(),
            "2026-11-05T101010Z-17-rank1-request2.json"
        );
        assert_eq!(
            last[1].file_name().unwrap(),
            "2026-11-05T101010Z-17-rank1.json"
        );
        assert_eq!(other[0].file_name().unwrap(), "x-18-rank0.json");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 7, "nothing overwritten, no temporary left");
        let d: Dump = serde_json::from_slice(&std::fs::read(&other[0]).unwrap()).unwrap();
        assert_eq!(d.run_id.as_deref(), Some("x-18"));
    }
}
