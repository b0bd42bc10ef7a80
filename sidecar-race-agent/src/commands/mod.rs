pub mod report;
pub mod run;
pub mod trace;
