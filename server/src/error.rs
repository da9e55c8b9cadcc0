//! Errors a request gets: an HTTP status and OpenAI's JSON error body
//! (`{"error": {"message", "type", "param", "code"}}`), naming the field.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use graphc_runtime::json_schema::SchemaError;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    pub code: &'static str,
}

impl ApiError {
    pub fn bad_request(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), param: param.map(str::to_string), code: "invalid_request" }
    }

    pub fn field(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::bad_request(Some(param), format!("`{param}`: {}", message.into()))
    }

    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), param: None, code }
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            500..=599 => "server_error",
            _ => "invalid_request_error",
        }
    }

    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": self.code}})
    }
}

/// A schema graphc cannot generate for, named by its path in the request.
impl From<SchemaError> for ApiError {
    fn from(e: SchemaError) -> ApiError {
        ApiError::field(&e.path, e.why)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
