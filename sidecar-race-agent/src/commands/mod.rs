pub mod lint;
pub mod report;
pub mod run;
pub mod timeline;
pub mod trace;
pub mod unpin;
