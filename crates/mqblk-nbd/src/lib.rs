//! NBD for mqblk: a server that exports any [`mqblk_core::Device`] (the
//! engine of `mqblk serve`), and a client driver that makes a remote NBD
//! export an mqblk device, one connection per hardware queue.
//!
//! The wire format lives in [`mqblk_nbd_proto`]; this crate does the I/O.
//!
//! - [`transport`]: TCP and unix sockets, TLS streams.
//! - [`tls`]: the server's rustls configuration from PEM files.
//! - [`server`]: exports, listener, per-connection negotiation and the
//!   pipelined transmission loop.
//! - [`client`]: the `nbd://` and `nbd+unix://` device kind: URL,
//!   negotiation, and the [`mqblk_core::Driver`].
//! - [`serve`]: the server as one of `mqblk serve`'s exports
//!   ([`mqblk_export::Export`]): its options, its startup line, its stop
//!   and its end.

#![warn(missing_docs)]
// One `unsafe` block: borrowing a context's completion fd for epoll.
#![deny(unsafe_code)]

pub mod serve;

pub mod tls;
pub mod transport;

pub mod server;

pub mod client;

pub use client::{open, NbdDriver};
pub use mqblk_nbd_proto::TlsMode;
pub use server::{ConnLimits, Export, Listen, Server, ServerConfig, ServerError};
