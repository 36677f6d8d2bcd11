//! Any bytes given to the artifact loader — from memory (`Artifact::decode`) and streamed
//! (`Artifact::read_from`) — must give the same verdict, an artifact or an error, never a panic, a
//! hang or an abort; and an artifact that loads must run on seeded inputs without one.
//!
//! Mutated artifacts almost always fail the checksum, so bytes that fail only that check are
//! resealed (`Artifact::reseal`) and loaded again: the fuzzer then reaches the metadata decoder,
//! validation and the kernels. Running is skipped for artifacts whose arena or estimated work is
//! too large for a fuzzing iteration (the limits are the fuzzer's, not the runtime's).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tandem_runtime::artifact::{Artifact, ArtifactError};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session};

/// Largest arena run per iteration.
const MAX_RUN_ARENA: usize = 4 << 20;
/// Largest estimated work (multiply-adds, roughly) run per iteration.
const MAX_RUN_WORK: u128 = 20_000_000;

/// An upper bound on a step's work: every output element reads at most every element of its
/// largest input.
fn estimated_work(a: &Artifact) -> u128 {
    a.steps
        .iter()
        .map(|s| {
            let out: u128 = s
                .outputs
                .iter()
                .map(|&t| a.tensors[t].elements() as u128)
                .sum();
            let widest = s
                .inputs
                .iter()
                .flatten()
                .map(|&t| a.tensors[t].elements() as u128)
                .max()
                .unwrap_or(1);
            out * widest.max(1) + out
        })
        .sum()
}

fn load(bytes: &[u8]) -> Result<Artifact, ArtifactError> {
    let decoded = Artifact::decode(bytes);
    let streamed = Artifact::read_from(bytes);
    match (&decoded, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(
            a.encode().ok(),
            b.encode().ok(),
            "decode and read_from load different artifacts"
        ),
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "decode and read_from disagree: {:?} vs {:?}",
            a.as_ref().err(),
            b.as_ref().err()
        ),
    }
    decoded
}

fn run(artifact: Artifact) {
    if artifact.arena_bytes > MAX_RUN_ARENA || estimated_work(&artifact) > MAX_RUN_WORK {
        return;
    }
    let model = Model::from_artifact(artifact);
    let mut rng = Rng::new(7);
    let inputs: Vec<NpyArray> = model
        .inputs()
        .iter()
        .map(|t| NpyArray::from_f32(t.shape.clone(), &rng.uniform(t.elements(), 2.0)))
        .collect();
    let Ok(mut session) = Session::try_new(&model, 1) else {
        return;
    };
    let outputs = session.run(&inputs).expect("inputs made from the model's own shapes");
    assert_eq!(outputs.len(), model.outputs().len());
}

fuzz_target!(|data: &[u8]| {
    match load(data) {
        Ok(artifact) => run(artifact),
        Err(ArtifactError::Checksum { .. }) => {
            let mut image = data.to_vec();
            if Artifact::reseal(&mut image) {
                if let Ok(artifact) = load(&image) {
                    run(artifact);
                }
            }
        }
        Err(_) => {}
    }
});
