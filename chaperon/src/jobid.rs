//! Job ids as Slurm's commands spell them (`123`, `123_4`, `123_[1-3,7]`, `123.0`, `123.batch`),
//! parsed into `JobRef`s so the chaperon can check that every job a call names is in scope.
//! Which spellings a command takes is its `Syntax`. Pure; any input gives a value or an error.

/// Highest array task id: Slurm's MaxArraySize is at most 4000001, tasks count from 0.
pub const MAX_TASK_ID: u32 = 4_000_000;

/// Which tasks of a job (array) a spec names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tasks {
    /// `123`: the job, or every task of the array 123.
    Whole,
    /// `123_4`.
    One(u32),
    /// `123_[1-3,7]`: inclusive ranges, in the order written; never expanded here.
    Ranges(Vec<(u32, u32)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Id(u32),
    Batch,
    Extern,
    Interactive,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    pub job: u32,
    pub tasks: Tasks,
    pub step: Option<Step>,
}

/// The spellings a command accepts beyond `N` and `N_M`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syntax {
    /// `N_[a-b,c]` (scancel, scontrol).
    pub ranges: bool,
    /// `N.S`, `N.batch`... (scancel, sacct, sstat, squeue --steps, scontrol show step).
    pub steps: bool,
}

pub const PLAIN: Syntax = Syntax { ranges: false, steps: false };
pub const RANGES: Syntax = Syntax { ranges: true, steps: false };
pub const STEPS: Syntax = Syntax { ranges: false, steps: true };
pub const RANGES_AND_STEPS: Syntax = Syntax { ranges: true, steps: true };

const BAD_ID: &str = "expected a job id such as 123, 123_4, 123_[1-3] or 123.0";
const NO_STEP: &str = "this command takes job ids without a step (123 or 123_4, not 123.0)";
const NO_RANGE: &str = "this command takes one array task per id (123_4), not a range (123_[1-3])";
const HET: &str = "heterogeneous job components (123+1) are not supported in agent-sandbox";

fn number(s: &str) -> Option<u32> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

fn task(s: &str) -> Result<u32, &'static str> {
    number(s).filter(|&t| t <= MAX_TASK_ID).ok_or("expected array task ids from 0 to 4000000")
}

fn tasks(s: &str, syntax: Syntax) -> Result<Tasks, &'static str> {
    let Some(inner) = s.strip_prefix('[') else {
        return task(s).map(Tasks::One);
    };
    if !syntax.ranges {
        return Err(NO_RANGE);
    }
    let inner = inner.strip_suffix(']').ok_or(BAD_ID)?;
    let mut ranges = Vec::new();
    for item in inner.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (task(lo)?, task(hi)?),
            None => (task(item)?, task(item)?),
        };
        if lo > hi {
            return Err("an array task range must go upwards, as 1-3");
        }
        ranges.push((lo, hi));
    }
    Ok(Tasks::Ranges(ranges))
}

fn step(s: &str) -> Result<Step, &'static str> {
    let named = [("batch", Step::Batch), ("extern", Step::Extern), ("interactive", Step::Interactive)];
    if let Some((_, st)) = named.iter().find(|(n, _)| n.eq_ignore_ascii_case(s)) {
        return Ok(*st);
    }
    number(s).map(Step::Id).ok_or("expected a step id: a number, batch, extern or interactive")
}

/// One job spec. Zero is never a job id.
pub fn parse_job_ref(s: &str, syntax: Syntax) -> Result<JobRef, &'static str> {
    if s.contains('+') {
        return Err(HET);
    }
    let (head, step) = match s.split_once('.') {
        Some(_) if !syntax.steps => return Err(NO_STEP),
        Some((head, st)) => (head, Some(step(st)?)),
        None => (s, None),
    };
    let (job, tasks) = match head.split_once('_') {
        Some((job, t)) => (job, tasks(t, syntax)?),
        None => (head, Tasks::Whole),
    };
    let job = number(job).filter(|&j| j != 0).ok_or(BAD_ID)?;
    if step.is_some() && matches!(tasks, Tasks::Ranges(_)) {
        return Err("a step belongs to one job: write 123_4.0, not 123_[1-3].0");
    }
    Ok(JobRef { job, tasks, step })
}

/// Comma-separated specs. Commas inside `[...]` belong to a task range, not to the list.
pub fn parse_job_list(v: &str, syntax: Syntax) -> Result<Vec<JobRef>, &'static str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in v.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or(BAD_ID)?,
            ',' if depth == 0 => {
                out.push(parse_job_ref(&v[start..i], syntax)?);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(parse_job_ref(&v[start..], syntax)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(job: u32, tasks: Tasks, step: Option<Step>) -> JobRef {
        JobRef { job, tasks, step }
    }

    #[test]
    fn plain_ids_and_array_tasks() {
        assert_eq!(parse_job_ref("123", PLAIN), Ok(one(123, Tasks::Whole, None)));
        assert_eq!(parse_job_ref("123_4", PLAIN), Ok(one(123, Tasks::One(4), None)));
        assert_eq!(parse_job_ref("123_0", PLAIN), Ok(one(123, Tasks::One(0), None)));
        assert_eq!(parse_job_ref("4294967295", PLAIN).map(|j| j.job), Ok(u32::MAX));
        for bad in ["", "0", "-1", "+1", "12a", "4294967296", "1_", "_1", "1__2", "1_x", "1_4000001", " 1", "1 "] {
            assert!(parse_job_ref(bad, RANGES_AND_STEPS).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ranges_only_where_the_command_takes_them() {
        let r = Tasks::Ranges(vec![(1, 3), (7, 7)]);
        assert_eq!(parse_job_ref("123_[1-3,7]", RANGES), Ok(one(123, r, None)));
        assert_eq!(parse_job_ref("123_[1-3]", PLAIN), Err(NO_RANGE));
        for bad in ["1_[", "1_[]", "1_[1-]", "1_[3-1]", "1_[1,]", "1_[1-3", "1_1-3]", "1_[1-3]x", "1_[a]", "1_[*]"] {
            assert!(parse_job_ref(bad, RANGES).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn steps_only_where_the_command_takes_them() {
        assert_eq!(parse_job_ref("5.0", STEPS), Ok(one(5, Tasks::Whole, Some(Step::Id(0)))));
        assert_eq!(parse_job_ref("5_2.batch", STEPS), Ok(one(5, Tasks::One(2), Some(Step::Batch))));
        assert_eq!(parse_job_ref("5.EXTERN", STEPS), Ok(one(5, Tasks::Whole, Some(Step::Extern))));
        assert_eq!(parse_job_ref("5.interactive", STEPS).map(|j| j.step), Ok(Some(Step::Interactive)));
        assert_eq!(parse_job_ref("5.0", PLAIN), Err(NO_STEP));
        for bad in ["5.", "5.x", "5.0.1", "5.-1", "5_[1-2].0", ".0"] {
            assert!(parse_job_ref(bad, RANGES_AND_STEPS).is_err(), "{bad:?}");
        }
        assert_eq!(parse_job_ref("5+1", RANGES_AND_STEPS), Err(HET));
    }

    #[test]
    fn lists_split_on_commas_outside_brackets() {
        let l = parse_job_list("1,2_3,4_[5,7-9]", RANGES).unwrap();
        assert_eq!(l.iter().map(|j| j.job).collect::<Vec<_>>(), [1, 2, 4]);
        assert_eq!(l[2].tasks, Tasks::Ranges(vec![(5, 5), (7, 9)]));
        for bad in ["", ",", "1,", ",1", "1,,2", "1]", "1_[2]]", "1 2"] {
            assert!(parse_job_list(bad, RANGES).is_err(), "{bad:?}");
        }
    }
}

/// Back to Slurm's spelling, for the argument list of the real command.
impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.job)?;
        match &self.tasks {
            Tasks::Whole => {}
            Tasks::One(t) => write!(f, "_{t}")?,
            Tasks::Ranges(r) => {
                let items: Vec<String> =
                    r.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
                write!(f, "_[{}]", items.join(","))?
            }
        }
        match self.step {
            None => Ok(()),
            Some(Step::Id(s)) => write!(f, ".{s}"),
            Some(Step::Batch) => write!(f, ".batch"),
            Some(Step::Extern) => write!(f, ".extern"),
            Some(Step::Interactive) => write!(f, ".interactive"),
        }
    }
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn job_refs_print_as_slurm_spells_them() {
        let syn = Syntax { ranges: true, steps: true };
        for s in ["123", "123_4", "123_[1-3,7]", "123.0", "123_4.batch", "9.extern"] {
            assert_eq!(parse_job_ref(s, syn).map(|r| r.to_string()).as_deref(), Ok(s), "{s}");
        }
    }
}
