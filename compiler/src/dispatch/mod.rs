//! Emulation of GPU dispatch decisions (being written).
