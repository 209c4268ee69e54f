//! The cluster spec: who runs where, built from the tasks' registrations, and each task's
//! `TF_CONFIG`.
//!
//! `TF_CONFIG` follows TensorFlow's format for MultiWorkerMirroredStrategy with a chief:
//! `{"cluster": {"chief": ["h:p"], "worker": [...], "evaluator": [...]}, "task": {"type": "worker",
//! "index": 0}}`. Empty roles are left out. TensorFlow counts only `chief` and `worker` as
//! training replicas; an evaluator entry is accepted and ignored by the strategy.

use serde_json::{Map, Value, json};

use crate::error::{ClusterError, Result};
use crate::roles::{Role, TaskRole, roles};

/// What a task tells the driver when it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The Spark task (partition) index: 0 is the chief.
    pub task_index: u32,
    /// Spark's attempt number of the task; a retry registers with a higher one.
    pub attempt: u32,
    /// The executor's host, as the other tasks reach it.
    pub host: String,
    /// The trainer's process id, for logs and failure reports.
    pub pid: u32,
    /// Spark's executor id.
    pub executor_id: String,
    /// The port of the data plane's listener, already bound by the task.
    pub data_port: u16,
    /// The port reserved for TensorFlow's gRPC server.
    pub tf_port: u16,
    /// The accelerator addresses Spark assigned to the task.
    pub gpus: Vec<String>,
}

/// One task of a complete cluster spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEntry {
    /// Its role and index within the role.
    pub role: TaskRole,
    /// What it registered.
    pub registration: Registration,
}

/// The tasks of a job, filled in as they register.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    roles: Vec<TaskRole>,
    tasks: Vec<Option<Registration>>,
}

impl ClusterSpec {
    /// An empty spec for `num_workers` training tasks (the chief included) and
    /// `num_evaluators` evaluators.
    pub fn new(num_workers: u32, num_evaluators: u32) -> Result<Self> {
        let roles = roles(num_workers, num_evaluators)?;
        let tasks = vec![None; roles.len()];
        Ok(ClusterSpec { roles, tasks })
    }

    /// How many tasks the job has.
    pub fn num_tasks(&self) -> u32 {
        self.roles.len() as u32
    }

    /// Records a registration. An index registers once per generation: a second registration
    /// of it is refused whatever its attempt (a later attempt must not take the place, and the
    /// token, of the task that registered; the driver's restart logic opens new attempts in a
    /// new generation), an earlier attempt is refused as stale, an index out of range as such.
    pub fn register(&mut self, registration: Registration) -> Result<()> {
        let total = self.num_tasks();
        let slot = self.tasks.get_mut(registration.task_index as usize).ok_or_else(|| {
            ClusterError::InvalidArgument(format!(
                "task index {} is out of range: the job has {total} tasks",
                registration.task_index
            ))
        })?;
        if let Some(existing) = slot {
            if registration.attempt < existing.attempt {
                return Err(ClusterError::InvalidArgument(format!(
                    "task {} attempt {} registered after attempt {}: a stale attempt",
                    registration.task_index, registration.attempt, existing.attempt
                )));
            }
            return Err(ClusterError::DuplicateRegistration {
                task_index: registration.task_index,
                attempt: registration.attempt,
                registered: existing.attempt,
            });
        }
        *slot = Some(registration);
        Ok(())
    }

    /// The task indexes that have not registered, in order.
    pub fn missing(&self) -> Vec<u32> {
        (0..self.num_tasks()).filter(|&i| self.tasks[i as usize].is_none()).collect()
    }

    /// True when every task registered.
    pub fn is_complete(&self) -> bool {
        self.tasks.iter().all(Option::is_some)
    }

    /// The error to give when waiting for the missing tasks timed out.
    pub fn timeout_error(&self) -> ClusterError {
        ClusterError::RendezvousTimeout { missing: self.missing(), total: self.num_tasks() }
    }

    /// Every task with its role, once the spec is complete.
    pub fn entries(&self) -> Result<Vec<TaskEntry>> {
        if !self.is_complete() {
            return Err(self.timeout_error());
        }
        Ok(self
            .roles
            .iter()
            .zip(&self.tasks)
            .map(|(role, task)| TaskEntry { role: *role, registration: task.clone().expect("complete") })
            .collect())
    }

    /// The `cluster` part of `TF_CONFIG`: role name → `host:tf_port` addresses by index.
    pub fn cluster_json(&self) -> Result<Value> {
        let mut cluster = Map::new();
        for entry in self.entries()? {
            let address = format!("{}:{}", entry.registration.host, entry.registration.tf_port);
            let list = cluster.entry(entry.role.role.name()).or_insert_with(|| Value::Array(Vec::new()));
            list.as_array_mut().expect("created as an array").push(Value::String(address));
        }
        Ok(Value::Object(cluster))
    }

    /// The `TF_CONFIG` JSON of task `task_index`.
    pub fn tf_config(&self, task_index: u32) -> Result<String> {
        let role = self.roles.get(task_index as usize).ok_or_else(|| {
            ClusterError::InvalidArgument(format!(
                "task index {task_index} is out of range: the job has {} tasks",
                self.num_tasks()
            ))
        })?;
        let config = json!({
            "cluster": self.cluster_json()?,
            "task": {"type": role.role.name(), "index": role.index},
        });
        Ok(config.to_string())
    }

    /// The role of task `task_index`.
    pub fn role_of(&self, task_index: u32) -> Option<Role> {
        self.roles.get(task_index as usize).map(|r| r.role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(task_index: u32, attempt: u32) -> Registration {
        Registration {
            task_index,
            attempt,
            host: "127.0.0.1".into(),
            pid: 100 + task_index,
            executor_id: task_index.to_string(),
            data_port: 5000 + task_index as u16,
            tf_port: 6000 + task_index as u16,
            gpus: vec![],
        }
    }

    #[test]
    fn tf_config_of_a_complete_spec() {
        let mut spec = ClusterSpec::new(3, 1).unwrap();
        for i in [3, 1, 0] {
            spec.register(registration(i, 0)).unwrap();
        }
        assert_eq!(spec.missing(), [2]);
        let err = spec.tf_config(0).unwrap_err();
        assert_eq!(err.to_string(), "1 of 4 tasks never registered: [2]");
        spec.register(registration(2, 0)).unwrap();

        let config: Value = serde_json::from_str(&spec.tf_config(2).unwrap()).unwrap();
        assert_eq!(
            config,
            json!({
                "cluster": {
                    "chief": ["127.0.0.1:6000"],
                    "worker": ["127.0.0.1:6001", "127.0.0.1:6002"],
                    "evaluator": ["127.0.0.1:6003"],
                },
                "task": {"type": "worker", "index": 1},
            })
        );
        let chief: Value = serde_json::from_str(&spec.tf_config(0).unwrap()).unwrap();
        assert_eq!(chief["task"], json!({"type": "chief", "index": 0}));
        assert_eq!(spec.role_of(3), Some(Role::Evaluator));
    }

    #[test]
    fn an_index_registers_once_whatever_the_attempt() {
        let mut spec = ClusterSpec::new(2, 0).unwrap();
        spec.register(registration(1, 0)).unwrap();
        let mut retry = registration(1, 1);
        retry.host = "10.0.0.9".into();
        assert!(matches!(
            spec.register(retry),
            Err(ClusterError::DuplicateRegistration { task_index: 1, attempt: 1, registered: 0 })
        ));
        assert!(matches!(
            spec.register(registration(1, 0)),
            Err(ClusterError::DuplicateRegistration { task_index: 1, attempt: 0, registered: 0 })
        ));
        assert!(spec.register(registration(2, 0)).unwrap_err().to_string().contains("out of range"));
        spec.register(registration(0, 0)).unwrap();
        assert_eq!(spec.entries().unwrap()[1].registration.host, "127.0.0.1");
        let mut later = ClusterSpec::new(1, 0).unwrap();
        later.register(registration(0, 2)).unwrap();
        assert!(later.register(registration(0, 1)).unwrap_err().to_string().contains("stale"));
        // Without workers beyond the chief, TF_CONFIG has only the chief.
        let single: Value = {
            let mut s = ClusterSpec::new(1, 0).unwrap();
            s.register(registration(0, 0)).unwrap();
            serde_json::from_str(&s.tf_config(0).unwrap()).unwrap()
        };
        assert_eq!(single["cluster"], json!({"chief": ["127.0.0.1:6000"]}));
    }
}
