"""What happens to memories over time: visits and pins, forks, sessions, forgetting by policy."""
