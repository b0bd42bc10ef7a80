//! Fields of `/proc/<pid>/fdinfo/<fd>`, where the kernel tells what a BPF fd is: a
//! program's skipped runs, a link's program.

/// The numeric field `key` of an fdinfo.
pub fn field(fdinfo: &str, key: &str) -> Option<u64> {
    fdinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_a_programs_and_a_links_fdinfo() {
        let prog = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    prog_type:\t5\nprog_jited:\t1\nprog_tag:\tb7ba1bb7b5e8d9a3\n\
                    memlock:\t4096\nprog_id:\t42\nrun_time_ns:\t0\nrun_cnt:\t0\n\
                    recursion_misses:\t17\nverified_insns:\t312\n";
        assert_eq!(field(prog, "recursion_misses"), Some(17));
        assert_eq!(
            field("prog_id:\t42\nrun_cnt:\t0\n", "recursion_misses"),
            None,
            "before 5.12"
        );
        let link = "pos:\t0\nflags:\t02000000\nlink_type:\ttracing\nlink_id:\t7\n\
                    prog_tag:\tb7ba1bb7b5e8d9a3\nprog_id:\t42\n";
        assert_eq!(field(link, "prog_id"), Some(42));
        assert_eq!(field(link, "link_id"), Some(7));
        assert_eq!(field(link, "link_type"), None, "not a number");
    }
}
