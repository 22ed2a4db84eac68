//! The batch plan (docs/protocol.md section 5), a pure function: the calls cut, in order, into
//! runs. A maximal run of consecutive calls that may run concurrently is one run; every other
//! call is a run of its own.

/// Cuts `concurrent` (one flag per call: registered, `read_only`, visible, and certain to need
/// no approval) into runs of call indexes. Concatenated, the runs are `0..n` in order.
pub(crate) fn plan(concurrent: &[bool]) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut previous_concurrent = false;
    for (index, &this_concurrent) in concurrent.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if this_concurrent && previous_concurrent => run.push(index),
            _ => runs.push(vec![index]),
        }
        previous_concurrent = this_concurrent;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn runs_are_maximal_and_in_order() {
        let cases: &[(&[bool], &[&[usize]])] = &[
            (&[], &[]),
            (&[true], &[&[0]]),
            (&[false], &[&[0]]),
            // read_file A, search_code B, write_file C, read_file D
            (&[true, true, false, true], &[&[0, 1], &[2], &[3]]),
            (&[true, true, true], &[&[0, 1, 2]]),
            (&[false, false], &[&[0], &[1]]),
            (
                &[false, true, true, false, true, true],
                &[&[0], &[1, 2], &[3], &[4, 5]],
            ),
            (&[true, false, true], &[&[0], &[1], &[2]]),
        ];
        for (flags, expected) in cases {
            let expected: Vec<Vec<usize>> = expected.iter().map(|run| run.to_vec()).collect();
            assert_eq!(plan(flags), expected, "{flags:?}");
        }
    }
}
