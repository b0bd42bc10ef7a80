//! The data path's first stage: the ring-buffer reader ([`stream`]) decodes kernel
//! records into typed events ([`events`]) and hands them over a batch per drain
//! ([`batches`]) to the pipeline. Nothing here knows pods or incidents.

pub mod batches;
pub mod events;
pub mod stream;
