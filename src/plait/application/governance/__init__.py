"""Tool governance (docs/design.md#governance): call facts for the policy, the Reviewer role,
approvals and the gate that puts them in order."""
