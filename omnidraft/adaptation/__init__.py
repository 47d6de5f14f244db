"""Online adaptation of the drafter: LoRA, the hybrid distillation loss, the guard."""
