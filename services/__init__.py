"""Pure logic of Pyramind: tokens, chunking, embedding, summarising and the roll-up. No HTTP, no storage."""
