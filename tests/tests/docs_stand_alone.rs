//! The project's docs and code stand alone: none sends a reader to a document outside the
//! repository (the contract's source documents, which a clone does not have). Every file git
//! tracks is read.

use std::path::Path;
use std::process::Command;

/// Documents that exist only outside the repository.
const OUTSIDE: [&str; 3] = ["EXTENSIONS.md", "DESIGN.md", "PROTOCOL.md"];

#[test]
fn no_file_cites_a_document_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace");
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    if !listed.status.success() {
        // Not a git checkout (a source tarball): nothing to list.
        return;
    }
    let mut cited = Vec::new();
    for file in listed
        .stdout
        .split(|byte| *byte == 0)
        .filter(|name| !name.is_empty())
    {
        let name = String::from_utf8_lossy(file).into_owned();
        if name.ends_with("docs_stand_alone.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(&name)) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if let Some(document) = OUTSIDE.iter().find(|document| line.contains(*document)) {
                cited.push(format!("{name}:{}: {document}", number + 1));
            }
        }
    }
    assert!(
        cited.is_empty(),
        "cited outside the repository:\n{}",
        cited.join("\n")
    );
}
