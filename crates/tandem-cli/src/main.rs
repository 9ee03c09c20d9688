//! The `tandem` binary. (Being written.)
fn main() {}
