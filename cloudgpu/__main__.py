from cloudgpu.cli import main

main()
