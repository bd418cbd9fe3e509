//! Writing dumps: one `collbench.fr/1` JSON file per rank, named
//! `rank<N>.json`, written atomically (temporary file, then rename) so a
//! reader never sees half a dump.

use super::model::{Clocks, Dump, Group, DUMP_SCHEMA};
use super::{mono_ns, wall_ns, RankRecorder};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What every dump of a run shares.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub host: String,
    pub world_size: usize,
    pub device: String,
    pub command: String,
    pub version: String,
}

/// The dump of one rank now.
pub fn snapshot(rec: &RankRecorder, info: &RunInfo, reason: &str) -> Dump {
    Dump {
        schema: DUMP_SCHEMA.into(),
        host: info.host.clone(),
        pid: std::process::id(),
        rank: rec.rank,
        world_size: info.world_size,
        device: info.device.clone(),
        command: info.command.clone(),
        version: info.version.clone(),
        reason: reason.into(),
        clocks: Clocks {
            wall_ns: wall_ns(),
            mono_ns: mono_ns(),
        },
        capacity: rec.capacity(),
        groups: vec![Group {
            name: super::WORLD_GROUP.into(),
            ranks: (0..info.world_size).collect(),
        }],
        entries: rec.snapshot(),
    }
}

/// Writes `rank<N>.json` for every recorder into `dir`; returns the paths.
pub fn write_all(
    dir: &Path,
    recs: &[std::sync::Arc<RankRecorder>],
    info: &RunInfo,
    reason: &str,
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    recs.iter()
        .map(|r| {
            let path = dir.join(format!("rank{}.json", r.rank));
            let bytes = serde_json::to_vec_pretty(&snapshot(r, info, reason))?;
            let tmp = dir.join(format!(".rank{}.json.tmp{}", r.rank, std::process::id()));
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::model::{IterKind, State};
    use super::super::OpInfo;
    use super::*;
    use std::sync::Arc;

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
        let paths = write_all(dir.path(), &recs, &info, "timeout").unwrap();
        assert_eq!(paths.len(), 2);
        let d: Dump = serde_json::from_slice(&std::fs::read(&paths[1]).unwrap()).unwrap();
        assert_eq!(
            (d.schema.as_str(), d.rank, d.world_size, d.reason.as_str()),
            (DUMP_SCHEMA, 1, 2, "timeout")
        );
        assert_eq!(d.entries[0].state, State::Started);
        assert_eq!(d.groups[0].ranks, vec![0, 1]);
        assert!(d.clocks.wall_ns > 0 && d.clocks.mono_ns > 0);
    }
}
