"""DataStore providers; each is imported only when the factory chooses it."""
