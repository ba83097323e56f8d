"""What every store shares: the relational row codec and the rules each backend applies."""
