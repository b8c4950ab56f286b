//! The transports a service is spoken to over: MCP over stdio ([`StdioServer`]), plain HTTP
//! ([`HttpServer`]) and MCP's Streamable HTTP ([`StreamableHttpServer`]), each a
//! [`crate::service::Transport`].

pub(super) mod http;
pub(super) mod stdio;
pub(super) mod streamable_http;

pub use http::HttpServer;
pub use stdio::StdioServer;
pub use streamable_http::{StreamableHttpServer, MCP_ENDPOINT_DEFAULT};
