"""How an episodic memory store keeps its items: the SQLite rows, their in-memory copies (resident rows,
row cache), the commit watch that keeps those true, opening a store and recovering its index."""
