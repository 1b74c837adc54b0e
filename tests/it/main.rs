//! The integration tests: real WASM plugins built from plugins/, real
//! directories and a real metastore; the library in process at the middle
//! boundary (`scheduler`, `api`), the real `trellis` binary where only real
//! processes prove it. One crate, one module per area.

mod inprocess;
mod support;

mod accounts;
mod api;
mod browser;
mod cli;
mod coordinators;
mod crash;
mod csv_aggregate;
mod fuzz;
mod incremental;
mod listeners;
mod metastore;
mod plan_agrees;
mod python;
mod readme;
mod remote;
mod runtime;
mod sandbox;
mod scenarios;
mod scheduler;
mod schemathesis;
mod served;
mod server;
mod spark;
mod storage;
