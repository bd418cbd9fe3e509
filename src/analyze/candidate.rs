//! A finding on its way into the diagnosis, with where it ranks among the
//! others: what the checks (`consistency`, `progress`, `diagnose`'s missing
//! dumps) hand to `diagnose`, which orders them.

use super::diagnosis::{Finding, FindingKind};

/// Finding order: lower comes first.
pub mod priority {
    pub const OP_MISMATCH: u8 = 0;
    pub const SIZE_MISMATCH: u8 = 1;
    pub const DTYPE_MISMATCH: u8 = 2;
    /// `not-joined` where the ranks of a later `not-joined` stopped
    /// first (see `progress::stopped_earlier`).
    pub const NOT_JOINED_EARLIER: u8 = 9;
    pub const NOT_JOINED: u8 = 10;
    pub const MISSING_WAITED: u8 = 20;
    pub const STUCK_BLAMED: u8 = 30;
    pub const LATE: u8 = 35;
    /// `not-joined` whose ranks are each pending in another group's
    /// collective: held up there, not idle.
    pub const NOT_JOINED_ELSEWHERE: u8 = 38;
    pub const STUCK_UNBLAMED: u8 = 40;
    pub const IDLE_AT_TIMEOUT: u8 = 45;
    pub const MISSING: u8 = 50;
}

/// A finding and where it ranks among the others.
pub struct Candidate {
    pub priority: u8,
    pub finding: Finding,
}

impl Candidate {
    /// A finding of `kind` in group `pg` at `seq` (either may be unknown)
    /// blaming `ranks`, ranked at `priority` (see [`priority`]).
    pub fn new(
        priority: u8,
        kind: FindingKind,
        pg: Option<String>,
        seq: Option<u64>,
        ranks: Vec<usize>,
        detail: String,
    ) -> Candidate {
        Candidate {
            priority,
            finding: Finding {
                kind,
                pg,
                pg_desc: None,
                seq,
                ranks,
                detail,
                run: None,
            },
        }
    }
}
