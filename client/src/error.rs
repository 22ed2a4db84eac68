//! `ClientError`: every way a call through the client can fail, each saying what to do.

use std::io;
use std::path::PathBuf;

use serde_json::Value;
use toold_protocol::{ErrorObject, RequestError};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answered on the socket (or it could not be reached).
    #[error(
        "cannot connect to toold at {}: {source}; start the daemon with `toold serve` (or \
         `systemctl --user start toold.socket`), or set TOOLD_SOCKET to where it listens",
        path.display()
    )]
    Connect { path: PathBuf, source: io::Error },

    /// The daemon answered with a JSON-RPC error (`error_code` in `toold_protocol` names
    /// the codes: `-32004` unknown session, `-32602` invalid params, …).
    #[error("toold refused {method}: {message} (error {code})")]
    Rpc {
        method: String,
        code: i32,
        message: String,
        data: Option<Value>,
    },

    /// The connection ended before the answer came. After a daemon restart,
    /// [`Client::reconnect`](crate::Client::reconnect) connects again.
    #[error("the connection to toold closed before it answered {method}")]
    Closed { method: String },

    /// This side withdrew the request before the answer came.
    #[error("{method} was withdrawn by this client before toold answered")]
    Canceled { method: String },

    /// The daemon sent something this client cannot read, or the params could not be
    /// serialized: a version mismatch between the client and the daemon, or a bug.
    #[error("protocol error in {method}: {detail}; check that the client and toold versions match")]
    Protocol { method: String, detail: String },
}

impl ClientError {
    /// The JSON-RPC error code, when the daemon answered with an error.
    pub fn rpc_code(&self) -> Option<i32> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            ClientError::Connect { .. }
            | ClientError::Closed { .. }
            | ClientError::Canceled { .. }
            | ClientError::Protocol { .. } => None,
        }
    }

    /// The tool a `tools/register` refusal names as registered already (by another
    /// connection, or by this one without `replace`).
    pub fn already_registered(&self) -> Option<&str> {
        match self {
            ClientError::Rpc {
                data: Some(data), ..
            } => data.get("already_registered")?.as_str(),
            _ => None,
        }
    }

    pub(crate) fn from_request(method: &str, error: RequestError) -> Self {
        let method = method.to_owned();
        match error {
            RequestError::Rpc(ErrorObject {
                code,
                message,
                data,
            }) => ClientError::Rpc {
                method,
                code,
                message,
                data,
            },
            RequestError::Closed => ClientError::Closed { method },
            RequestError::Canceled => ClientError::Canceled { method },
            RequestError::InvalidParams(detail) | RequestError::InvalidResult(detail) => {
                ClientError::Protocol { method, detail }
            }
        }
    }

    pub(crate) fn protocol(method: &str, detail: impl ToString) -> Self {
        ClientError::Protocol {
            method: method.to_owned(),
            detail: detail.to_string(),
        }
    }
}
