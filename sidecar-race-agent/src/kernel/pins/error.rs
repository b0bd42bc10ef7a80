//! What goes wrong pinning or adopting.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum PinError {
    #[error("{0}")]
    Io(String),
    #[error("pinned map {map} is {got}, this build makes {want}")]
    Shape {
        map: String,
        want: String,
        got: String,
    },
}
