//! The incidents API's contract, shared by the server (`http/`) and its clients
//! (`report/`): the path, the page shape and its limits, and the header a token
//! travels in through the API server's pod proxy. A client importing the server to
//! learn these would pull the whole server into `report`; both import them from here.

use serde::{Deserialize, Serialize};

/// The incidents endpoint (docs/reference.md, "HTTP endpoints").
pub const INCIDENTS_PATH: &str = "/api/v1/incidents";

/// Incidents in one `/api/v1/incidents` answer without `?limit=`, and at most.
pub const DEFAULT_LIMIT: usize = 1_000;
pub const MAX_LIMIT: usize = 10_000;

/// The header that carries the token through the API server's pod proxy, which removes
/// `Authorization` once it has authenticated the caller (`report --agents-via-api`). The
/// token is reviewed exactly like a bearer token.
pub const PROXIED_TOKEN: &str = "x-sidecar-race-token";

/// One `/api/v1/incidents` answer: the server fills it with its incident views, a
/// client reads it into the fields it uses. `truncated`: more matched than `limit`.
#[derive(Serialize, Deserialize)]
pub struct Page<T> {
    pub incidents: T,
    /// Absent from agents older than the limit: read as false.
    #[serde(default)]
    pub truncated: bool,
}

/// The path asking an agent for all it holds (up to [`MAX_LIMIT`]).
pub fn all_incidents_path() -> String {
    format!("{INCIDENTS_PATH}?limit={MAX_LIMIT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_without_truncated_reads_as_complete() {
        let page: Page<Vec<u32>> = serde_json::from_str(r#"{"incidents":[1,2]}"#).unwrap();
        assert_eq!(page.incidents, vec![1, 2]);
        assert!(!page.truncated);
    }

    #[test]
    fn the_whole_history_path_asks_for_the_most_one_answer_carries() {
        assert_eq!(all_incidents_path(), "/api/v1/incidents?limit=10000");
    }
}
