from setuptools import find_packages, setup

setup(
    name="ma-rlhf",
    version="0.1.0",
    description="RLHF with macro actions (MA-PPO): SFT, reward model and PPO stages on DeepSpeed",
    packages=find_packages(include=["dschat", "dschat.*", "evaluation", "evaluation.*"]),
    package_data={"dschat": ["assets/**/*"]},
    include_package_data=True,
    python_requires=">=3.10",
    extras_require={"wandb": ["wandb>=0.17"]},  # --report_to wandb
)
