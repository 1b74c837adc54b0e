//! The integration tests: real WASM plugins built from plugins/, a real
//! `trellis` binary, real directories. One crate, one module per area.

mod inprocess;
mod support;

mod api;
mod cli;
mod crash;
mod csv_aggregate;
mod listeners;
mod remote;
mod runtime;
mod sandbox;
mod scenarios;
mod scheduler;
mod server;
