//! The distributed runtime on real processes: `graft-mpi-selftest` under
//! `mpirun` with 2 and 3 processes (collectives and their gradients equal
//! to vmap over the same axis name, ranks that disagree, a rank that stalls
//! or dies), and without MPI (one process; refused under a launcher).
//! The MPI tests need the `mpi` feature and `mpirun` on the PATH (`MPIRUN`
//! names another launcher); with the feature, a missing launcher fails.

use std::process::{Command, Output};

fn selftest() -> Command {
    Command::new(env!("CARGO_BIN_EXE_graft-mpi-selftest"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn one_process_without_a_launcher_runs_every_collective() {
    let o = selftest().arg("collectives").env_remove("OMPI_COMM_WORLD_SIZE").env_remove("PMI_SIZE").output().unwrap();
    assert!(o.status.success() && text(&o).contains("rank 0 of 1: ok"), "{}", text(&o));
}

#[cfg(not(feature = "mpi"))]
#[test]
fn a_launcher_with_several_processes_is_refused_without_mpi() {
    let o = selftest().arg("collectives").env("OMPI_COMM_WORLD_SIZE", "2").output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("built without MPI") && text(&o).contains("--features mpi"), "{}", text(&o));
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use std::time::{Duration, Instant};

    /// `mpirun -np N graft-mpi-selftest MODE`, allowed to run as root and
    /// to place more processes than cores (OpenMPI's variables; other
    /// launchers ignore them).
    pub fn mpirun(n: usize, mode: &str, timeout: &str) -> (Output, Duration) {
        mpirun_with(n, mode, timeout, "auto")
    }

    /// [`mpirun`] with `GRAFT_OVERLAP` set to `overlap`.
    pub fn mpirun_with(n: usize, mode: &str, timeout: &str, overlap: &str) -> (Output, Duration) {
        let launcher = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
        let start = Instant::now();
        let o = Command::new(&launcher)
            .args(["-np", &n.to_string(), env!("CARGO_BIN_EXE_graft-mpi-selftest"), mode])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("GRAFT_COLLECTIVE_TIMEOUT", timeout)
            .env("GRAFT_OVERLAP", overlap)
            .output()
            .unwrap_or_else(|e| panic!("{launcher} could not start ({e}): the `mpi` feature needs an MPI launcher"));
        (o, start.elapsed())
    }

    #[test]
    fn collectives_and_their_gradients_equal_vmap_on_2_and_3_processes() {
        // With and without the background communication thread.
        for (overlap, how) in [("1", "on a background thread"), ("0", "on the caller's thread")] {
            for n in [2, 3] {
                let (o, _) = mpirun_with(n, "collectives", "60", overlap);
                let t = text(&o);
                assert!(o.status.success(), "{t}");
                for r in 0..n {
                    let want = format!("rank {r} of {n}: ok: 22 checks agree with vmap (collectives {how})");
                    assert!(t.contains(&want), "{t}");
                }
            }
        }
    }

    #[test]
    fn ranks_that_disagree_on_a_shape_all_get_the_error() {
        let (o, _) = mpirun_with(3, "mismatch", "60", "1");
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert_eq!(t.matches("rank 1 calls all_reduce(sum) on f64[3]").count(), 3, "{t}");
    }

    #[test]
    fn a_stalled_rank_ends_the_job_within_the_timeout() {
        let (o, took) = mpirun_with(2, "stall", "2", "1");
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        assert!(t.contains("no answer from the other ranks") && t.contains("aborting the MPI job"), "{t}");
        assert!(took < Duration::from_secs(60), "took {took:?}");
    }

    #[test]
    fn a_rank_that_dies_ends_the_job_instead_of_hanging() {
        let (o, took) = mpirun(3, "die", "20");
        assert!(!o.status.success(), "{}", text(&o));
        assert!(took < Duration::from_secs(60), "took {took:?}");
    }
}
