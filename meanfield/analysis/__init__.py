"""What a run means: energies, diagnostics, the projection Π♯ρ₀, mobilities, Wasserstein distances and the closed forms."""
