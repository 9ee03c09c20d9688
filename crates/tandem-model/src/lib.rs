//! Model checking of Tandem's group protocol, and of the FlexKV FIFO protocol it replaces.
//!
//! Owns: stateright models and their properties. Must never: re-implement the protocol it
//! checks; the Tandem model drives the real rank cores (`tandem-core`) the agents run.
//!
//! # Layout
//!
//! - [`check`]: running the checker and reporting its size; shortest discoveries.
//! - [`flexkv`]: the FIFO protocol of SGLang's FlexKV connector (one ordered stream of tagged
//!   messages, receivers matching by their own call site). The checker must find its
//!   `Tag mismatch` counterexample: that is how we know the checker can fail.
//! - [`tandem`]: the Tandem model driving the real `tandem-core` `RankCore`s (leader and
//!   followers), with its properties and deliberately broken variants.

pub mod check;
pub mod flexkv;
pub mod tandem;
