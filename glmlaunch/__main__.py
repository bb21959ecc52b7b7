from glmlaunch.cli import main

main()
