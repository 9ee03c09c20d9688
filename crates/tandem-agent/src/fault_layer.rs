//! Test-only fault hook: a layerwise load that stalls before one layer.
//!
//! Owns the parsing of `TANDEM_FAULT_LAYER_STALL` (`layer:ms`: before copying layer `layer`
//! of any layerwise load, this rank's store sleeps `ms` milliseconds, like a disk tier that
//! stalls). It is compiled in only with the `fault-hooks` cargo feature (off by default, never
//! in a release build); without it [`before_layer`] does nothing and the variable is ignored.
//! It must never be the way an agent reports an error: it exists so that a process test can
//! show that one rank's stalled layer fails the task on every rank by the deadline.

/// The environment variable that arms the hook: `layer:ms`.
pub const LAYER_STALL_VAR: &str = "TANDEM_FAULT_LAYER_STALL";

/// Parses a hook's value: the layer and the stall in milliseconds.
///
/// Errors: a text naming the value and the expected form.
pub fn parse(value: &str) -> Result<(u32, u64), String> {
    let bad = || format!("{LAYER_STALL_VAR}={value:?}: expected layer:ms, for example 17:3000");
    let (layer, ms) = value.split_once(':').ok_or_else(bad)?;
    let layer = layer.parse::<u32>().map_err(|_| bad())?;
    let ms = ms.parse::<u64>().map_err(|_| bad())?;
    Ok((layer, ms))
}

#[cfg(feature = "fault-hooks")]
mod hook {
    use std::sync::OnceLock;

    use super::{parse, LAYER_STALL_VAR};

    static ARMED: OnceLock<Option<(u32, u64)>> = OnceLock::new();

    pub(super) fn armed() -> Option<(u32, u64)> {
        let hook = crate::fault::from_env(&ARMED, LAYER_STALL_VAR, parse);
        if let Some((layer, ms)) = hook {
            // Once per process, as the other hooks' announce does.
            static ANNOUNCED: std::sync::Once = std::sync::Once::new();
            ANNOUNCED.call_once(|| {
                tracing::warn!(
                    layer,
                    ms,
                    "fault hook armed: layerwise loads stall before this layer"
                )
            });
        }
        hook
    }
}

/// This rank's store is about to copy layer `layer` of a layerwise load: with the
/// `fault-hooks` feature and the hook armed for that layer, sleep its milliseconds first.
#[inline]
pub fn before_layer(layer: u32) {
    #[cfg(feature = "fault-hooks")]
    if let Some((at, ms)) = hook::armed() {
        if at == layer {
            tracing::warn!(layer, ms, "fault hook: stalling before this layer");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
    #[cfg(not(feature = "fault-hooks"))]
    let _ = layer;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_or_are_refused_with_the_form() {
        assert_eq!(parse("17:3000"), Ok((17, 3000)));
        for bad in ["17", "x:1", "1:y", ""] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("expected layer:ms"), "{e}");
        }
    }
}
