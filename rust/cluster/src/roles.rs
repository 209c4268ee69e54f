//! Roles: task 0 is the chief, the next tasks are workers, the last ones evaluators.
//!
//! The chief also trains (MultiWorkerMirroredStrategy counts it as a worker); it is the one
//! that writes checkpoints, event files and the exported model. Evaluators do not train.

use crate::error::{ClusterError, Result};

/// What a task does in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Trains, and writes the job's outputs.
    Chief,
    /// Trains.
    Worker,
    /// Evaluates checkpoints beside training.
    Evaluator,
}

impl Role {
    /// The job name TensorFlow uses: `chief`, `worker` or `evaluator`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Chief => "chief",
            Role::Worker => "worker",
            Role::Evaluator => "evaluator",
        }
    }
}

/// A task's role and its index among the tasks of that role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRole {
    /// The role.
    pub role: Role,
    /// The index within the role (TF_CONFIG's `task.index`).
    pub index: u32,
}

/// The role of every task of a job with `num_workers` training tasks (the chief included) and
/// `num_evaluators` evaluators, by Spark task index.
pub fn roles(num_workers: u32, num_evaluators: u32) -> Result<Vec<TaskRole>> {
    if num_workers == 0 {
        return Err(ClusterError::InvalidArgument(
            "a job needs at least one training task (the chief)".into(),
        ));
    }
    let chief = std::iter::once(TaskRole { role: Role::Chief, index: 0 });
    let workers = (0..num_workers - 1).map(|index| TaskRole { role: Role::Worker, index });
    let evaluators = (0..num_evaluators).map(|index| TaskRole { role: Role::Evaluator, index });
    Ok(chief.chain(workers).chain(evaluators).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chief_first_then_workers_then_evaluators() {
        let r = roles(3, 1).unwrap();
        let names: Vec<(&str, u32)> = r.iter().map(|t| (t.role.name(), t.index)).collect();
        assert_eq!(names, [("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]);
        assert_eq!(roles(1, 0).unwrap(), [TaskRole { role: Role::Chief, index: 0 }]);
        assert!(roles(0, 1).is_err());
    }
}
