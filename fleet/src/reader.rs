//! Read connections to one lake for a long-running reader (the MCP server): one DuckDB instance,
//! made on the first answer, whose extensions are loaded (signatures checked) and lake attached
//! once; every answer gets a connection of its own cloned from it (its own temporary views and
//! tables, the same attached lake). Opening a lake costs 0.5-0.8 s of CPU; an answer over a small
//! lake costs milliseconds.
//!
//! An answer that fails drops the instance, so the next one attaches again: a catalog that was
//! unreachable, or restarted meanwhile, costs one failed answer, never a server stuck on a dead
//! connection.

use std::sync::Mutex;

use duckdb::Connection;

use crate::lake::{connect, Access, LakeSpec};
use crate::{Fleet, FleetError};

/// Cloned read connections to one lake (see the module docs).
pub struct LakeReader {
    lake: LakeSpec,
    base: Mutex<Option<Connection>>,
}

impl LakeReader {
    /// A reader of `lake`; nothing is opened until the first answer.
    pub fn new(lake: LakeSpec) -> LakeReader {
        LakeReader { lake, base: Mutex::new(None) }
    }

    pub fn lake(&self) -> &LakeSpec {
        &self.lake
    }

    /// Run `f` on a [`Fleet`] over a connection of its own; on an error the instance is dropped
    /// and the next call attaches the lake again.
    pub fn with_fleet<T>(&self, f: impl FnOnce(&Fleet) -> Result<T, FleetError>) -> Result<T, FleetError> {
        let result = self.connection().and_then(Fleet::new).and_then(|fleet| f(&fleet));
        if result.is_err() {
            *self.base.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        result
    }

    /// Whether the instance is open (tests: an error drops it).
    pub fn is_open(&self) -> bool {
        self.base.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    fn connection(&self) -> Result<Connection, FleetError> {
        let mut base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        if base.is_none() {
            *base = Some(connect(&self.lake, &Access::Read)?);
        }
        Ok(base.as_ref().expect("opened above").try_clone()?)
    }
}
