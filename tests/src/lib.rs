//! Shared harness for the workspace-level integration tests (free ports, child processes).
