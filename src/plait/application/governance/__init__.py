"""Tool governance (DESIGN §5): call facts for the policy, the Reviewer role, approvals
and the gate that puts them in order."""
