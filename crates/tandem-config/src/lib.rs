//! Tandem's configuration: what every process reads before it starts.
//!
//! # Layout
//! - [`sections`]: the typed configuration, one struct per TOML section, every key with its
//!   unit and default. Unknown keys are refused (`deny_unknown_fields`).
//! - [`layout`]: the block-shard layout that follows from the model, PP and TP sizes.
//! - [`load`]: layering (defaults, then a TOML file, then `TANDEM__SECTION__KEY` environment
//!   variables, then overrides the caller passes from CLI flags) and validation.
//! - [`events`]: `[events]`, the leader's KV cache event stream.
//! - [`error`]: the typed errors of this crate.
//!
//! This crate reads files and the environment and nothing else: it never opens sockets, never
//! spawns processes and never logs. The documented default lives in `config/tandem.toml` at the
//! repository root; a test checks it parses and lists every key.

pub mod error;
pub mod events;
pub mod layout;
pub mod load;
pub mod sections;

pub use error::ConfigError;
pub use events::EventsConfig;
pub use layout::{LayoutError, ShardLayout};
pub use load::{load, load_str, Overrides};
pub use sections::*;
