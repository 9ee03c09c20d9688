//! Tandem's rank cores, sans IO: every group rule a rank's agent keeps.
//!
//! (Filled in as the cores land.)

pub mod index;
pub mod rebuild;

pub use index::{GroupIndex, IndexConfig, IndexError, LoadPlan, Pin, PinPurpose, StorePlan};
pub use rebuild::Rebuild;
